// Package benchbaseline holds each broker adapter's baseline for `outbox
// bench`: the broker's own acked publish rate, measured with the adapter's
// bare client sending the Publisher's messages, against which the relay's
// rate through that broker is a ratio. An adapter registers its baseline
// under the URL schemes it serves, in an init function; the command looks
// it up by the --broker URL's scheme. The baselines are not part of the
// adapters' API.
package benchbaseline

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Func publishes n messages of payloadBytes bytes to the destination of
// topic on the broker of brokerURL with the adapter's bare client, window
// at a time, waits for every acknowledgement, and returns how long that
// took. brokerURL is read as the adapter's Publisher reads it.
type Func func(ctx context.Context, brokerURL, topic string, n, payloadBytes, window int) (time.Duration, error)

var (
	mu    sync.RWMutex
	funcs = map[string]Func{}
)

// Register records fn as the baseline of the URL scheme (any case). It
// panics when fn is nil or the scheme has a baseline already.
func Register(scheme string, fn Func) {
	if fn == nil {
		panic("benchbaseline: Register of a nil Func")
	}
	scheme = strings.ToLower(scheme)
	mu.Lock()
	defer mu.Unlock()
	if _, dup := funcs[scheme]; dup {
		panic(fmt.Sprintf("benchbaseline: Register called twice for scheme %q", scheme))
	}
	funcs[scheme] = fn
}

// Lookup returns the baseline registered for scheme (any case), and whether
// there is one.
func Lookup(scheme string) (Func, bool) {
	mu.RLock()
	defer mu.RUnlock()
	fn, ok := funcs[strings.ToLower(scheme)]
	return fn, ok
}
