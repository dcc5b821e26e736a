package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestUniqueKeyAndCompareAndSet(t *testing.T) {
	t.Parallel()
	errDup := errors.New("duplicate key")
	errOther := errors.New("disk full")
	isDup := func(err error) bool { return errors.Is(err, errDup) }
	for _, c := range []struct {
		err     error
		applied bool
		wantErr error
	}{{nil, true, nil}, {errDup, false, nil}, {errOther, false, errOther}} {
		applied, err := UniqueKey(c.err, isDup)
		if applied != c.applied || !errors.Is(err, c.wantErr) || (c.wantErr == nil && err != nil) {
			t.Errorf("UniqueKey(%v) = %v, %v; want %v, %v", c.err, applied, err, c.applied, c.wantErr)
		}
	}
	if _, err := UniqueKey(errDup, nil); !errors.Is(err, errDup) {
		t.Errorf("UniqueKey with no predicate swallowed %v", err)
	}
	for _, c := range []struct {
		n       int64
		err     error
		applied bool
	}{{1, nil, true}, {3, nil, true}, {0, nil, false}, {1, errOther, false}} {
		applied, err := CompareAndSet(c.n, c.err)
		if applied != c.applied || !errors.Is(err, c.err) || (c.err == nil && err != nil) {
			t.Errorf("CompareAndSet(%d, %v) = %v, %v", c.n, c.err, applied, err)
		}
	}
}

// A consumer group the inbox cannot record is a mistake of configuration:
// checked per message, it sent every message to the dead-letter path as
// Permanent. Handler refuses it when it is built.
func TestInboxHandlerRefusesABadGroup(t *testing.T) {
	ib := NewInbox[struct{}](nil)
	noop := func(context.Context, struct{}, Message) error { return nil }
	for _, group := range []string{"", strings.Repeat("g", MaxGroupLen+1), "bad\xff", "nul\x00"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Handler accepted group %q", group)
				}
			}()
			ib.Handler(group, noop)
		}()
	}
	if h := ib.Handler(strings.Repeat("g", MaxGroupLen), noop); h == nil {
		t.Fatal("no handler for a valid group")
	}
}
