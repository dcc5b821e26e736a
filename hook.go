package outbox

import (
	"context"
	"fmt"
)

// Hook is a value that implements one or more of the hook interfaces:
// WriteHook (called by a Writer), BatchHook (by a Relay) and CleanupHook
// (by a Cleaner). WriterConfig, RelayConfig and CleanerConfig all take a
// list of hooks, and the same list can be given to all three: each calls
// the hooks that implement its interface and passes over the others.
// NewWriter, NewRelay and NewCleaner refuse a nil hook or a value that
// implements none of the interfaces, naming its place in the list and its
// type.
//
// Hook is any, so that a list of hooks can also be written []any.
type Hook = any

// WriteHook is called by every write of a Writer (Write, and a driver's
// own write paths, such as outboxpgx's QueueWrite and WriteOnCommit) once
// per call that has messages, with the call's context and its messages,
// before they are validated and stored. plugin/outboxotel's Hook is one: it
// writes the trace context of ctx into the messages' headers.
//
// OnWrite may change the messages in msgs: the slice and each message's
// Headers map are copies of the caller's, which stay as they were. (The
// Payload bytes are shared: replace a payload, never change it in place.)
// The messages are validated after the hooks, so that what a hook adds is
// held to the same limits. An error aborts the write before any statement:
// nothing is stored, the transaction is untouched, and the write returns
// the error wrapped (errors.Is and errors.As see it). Hooks run in their
// order in the list; the first error stops them.
type WriteHook interface {
	OnWrite(ctx context.Context, msgs []Message) error
}

// BatchHook is called by a Relay after every finished batch, with what
// became of its messages. plugin/outboxprom's Metrics and
// plugin/outboxotel's Hook are ones.
type BatchHook interface {
	OnBatch(ctx context.Context, report BatchReport)
}

// CleanupHook is called by a Cleaner after every round of its Run, with
// what the round deleted and the error that ended it, if any (nil for a
// round cut short by the end of Run's context). plugin/outboxprom's Metrics
// is one.
type CleanupHook interface {
	OnCleanup(ctx context.Context, report CleanerReport, err error)
}

// checkHooks refuses a nil hook and a value that implements no hook
// interface, for the constructor fn.
func checkHooks(fn string, hooks []Hook) error {
	for i, h := range hooks {
		switch h.(type) {
		case WriteHook, BatchHook, CleanupHook:
		case nil:
			return fmt.Errorf("outbox: %s: Hooks[%d] is nil", fn, i)
		default:
			return fmt.Errorf("outbox: %s: Hooks[%d] (%T) is not a hook: it implements none of WriteHook (OnWrite), BatchHook (OnBatch) and CleanupHook (OnCleanup)", fn, i, h)
		}
	}
	return nil
}

// hooksOf returns the hooks that implement T, in their order.
func hooksOf[T any](hooks []Hook) []T {
	var out []T
	for _, h := range hooks {
		if t, ok := h.(T); ok {
			out = append(out, t)
		}
	}
	return out
}
