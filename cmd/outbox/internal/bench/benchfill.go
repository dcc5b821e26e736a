package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"strings"

	"github.com/outbox-go/outbox"
)

func benchPayload(size int) func(i int) json.RawMessage {
	return func(i int) json.RawMessage {
		head := fmt.Sprintf(`{"n":%d,"pad":"`, i)
		pad := max(size-len(head)-2, 0)
		return json.RawMessage(head + strings.Repeat("x", pad) + `"}`)
	}
}

// fill inserts n messages in transactions of up to 1000, untimed, and
// poison, when not nil, after the first half of them; with keys above 0,
// message i has key i mod keys (benchKey).
func fill(ctx context.Context, db *dbopen.Database, prefix string, n, keys int, payload func(int) json.RawMessage, poison *outbox.Message) error {
	const chunk = 1000
	for start := 0; start < n; {
		end := min(start+chunk, n)
		if poison != nil && start < n/2 && end > n/2 {
			end = n / 2
		}
		msgs := make([]outbox.Message, 0, end-start)
		for i := start; i < end; i++ {
			msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("%s-%d", prefix, i), Topic: benchTopic, Key: benchKey(keys, i), Payload: payload(i)})
		}
		if err := writeTx(ctx, db, msgs); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
		start = end
		if poison != nil && start == n/2 {
			// The Writer refuses what a transport cannot carry: the poison
			// goes in as a row another program's INSERT would write.
			if err := insertUnchecked(ctx, db, *poison); err != nil {
				return fmt.Errorf("fill: the poison: %w", err)
			}
			poison = nil
		}
	}
	return nil
}

// benchKey is the key of fill's message i among keys keys ("" when keys is
// 0): consecutive messages have different keys, so that a key's messages
// spread over the batches.
func benchKey(keys, i int) string {
	if keys <= 0 {
		return ""
	}
	return fmt.Sprintf("key-%d", i%keys)
}
