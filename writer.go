package outbox

import (
	"context"
	"fmt"
	"maps"

	"github.com/outbox-go/outbox/outboxdriver"
)

// WriterConfig configures a Writer. Zero fields take their defaults.
type WriterConfig struct {
	// MaxPayloadBytes is the largest payload accepted. Defaults to 1 MiB
	// (DefaultMaxBytes).
	MaxPayloadBytes int
	// Hooks are called by every write, before its messages are validated
	// and stored: the writer calls those that implement WriteHook and
	// passes over the others, so that one list can serve the writer, the
	// relay and the cleaner (see Hook). A value that implements no hook
	// interface is refused. Defaults to none.
	Hooks []Hook
}

// WithDefaults returns cfg with zero fields defaulted.
func (cfg WriterConfig) WithDefaults() WriterConfig {
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = DefaultMaxBytes
	}
	return cfg
}

func (cfg WriterConfig) validate() error {
	if cfg.MaxPayloadBytes < 1 {
		return fmt.Errorf("outbox: NewWriter: MaxPayloadBytes is %d; it must be positive (or 0 for the default)", cfg.MaxPayloadBytes)
	}
	return checkHooks("NewWriter", cfg.Hooks)
}

// Writer inserts messages inside the caller's own transaction, so that the
// message commits or rolls back with the business change it describes.
type Writer[TTx any] struct {
	driver   outboxdriver.Inserter[TTx]
	maxBytes int
	hooks    []WriteHook
}

// NewWriter returns a Writer that inserts through driver. It refuses a
// negative MaxPayloadBytes and a value in Hooks that is no hook.
func NewWriter[TTx any](driver outboxdriver.Inserter[TTx], cfg WriterConfig) (*Writer[TTx], error) {
	if driver == nil {
		return nil, fmt.Errorf("outbox: NewWriter: driver is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Writer[TTx]{driver: driver, maxBytes: cfg.MaxPayloadBytes, hooks: hooksOf[WriteHook](cfg.Hooks)}, nil
}

// Write runs the write hooks (WriteHook) over msgs, validates them and
// inserts them in tx, all or none. An error of a hook comes back wrapped,
// before any statement: nothing was inserted and tx is untouched.
//
// It returns a *ValidationError (errors.Is ErrInvalidMessage) for a message that
// breaks a limit, and a *DuplicateError (errors.Is ErrDuplicate) when a msg_id
// is already in the table or repeated in msgs. In both cases nothing was
// inserted and tx is still usable: the caller decides whether to commit.
// The table tells a duplicate only while it holds the first row: once
// `outbox cleanup` (or `dead drop`) has deleted it, the same msg_id is
// written and published again, and the consumers' inbox is what keeps its
// effect once.
//
// The payload must be JSON that every supported database's JSON type
// stores: UTF-8, no \u0000 escape, no unpaired UTF-16 surrogate escape, no
// number beyond PostgreSQL's numeric (131072 digits before the decimal
// point, 16383 after). Validation refuses these before the INSERT, since on
// PostgreSQL a refused INSERT aborts the caller's transaction. A limit of
// one database alone (MariaDB's json_valid allows 31 levels of nesting)
// comes back as a *ValidationError with Field "message" that wraps the
// database's error; on MariaDB, MySQL and SQLite the transaction is still
// usable, and on PostgreSQL (which validation leaves nothing known of to
// refuse) the error says that the transaction was aborted.
func (w *Writer[TTx]) Write(ctx context.Context, tx TTx, msgs ...Message) error {
	msgs, err := w.Prepare(ctx, msgs...)
	if err != nil || len(msgs) == 0 {
		return err
	}
	return w.driver.InsertTx(ctx, tx, msgs)
}

// Prepare is the part of Write before the insert: it runs the write hooks
// (WriteHook) over a copy of msgs, validates the result (Validate) and
// returns the messages to insert. msgs and their Headers maps are not
// changed. With no hooks it returns msgs itself; with no messages it runs
// no hook and returns nil.
//
// Write calls it. A driver's own write path (outboxpgx's QueueWrite and
// WriteOnCommit) calls it in place of Write, so that no write skips the
// hooks; an application has no need of it.
func (w *Writer[TTx]) Prepare(ctx context.Context, msgs ...Message) ([]Message, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if len(w.hooks) > 0 {
		own := make([]Message, len(msgs))
		copy(own, msgs)
		for i := range own {
			if own[i].Headers != nil {
				own[i].Headers = maps.Clone(own[i].Headers)
			}
		}
		for _, h := range w.hooks {
			if err := h.OnWrite(ctx, own); err != nil {
				return nil, fmt.Errorf("outbox: write hook %T: %w", h, err)
			}
		}
		msgs = own
	}
	if err := w.Validate(msgs...); err != nil {
		return nil, err
	}
	return msgs, nil
}

// Validate checks msgs as Write does, without inserting them and without
// the hooks: a *ValidationError for a message that breaks a limit, a
// *DuplicateError for a msg_id repeated in msgs. Only the database can tell
// a msg_id already in the table.
func (w *Writer[TTx]) Validate(msgs ...Message) error {
	var seen map[string]struct{}
	if len(msgs) > 1 {
		seen = make(map[string]struct{}, len(msgs))
	}
	var dups []string
	for i := range msgs {
		if err := validateMessage(i, &msgs[i], w.maxBytes); err != nil {
			return err
		}
		if seen != nil {
			if _, ok := seen[msgs[i].MsgID]; ok {
				dups = append(dups, msgs[i].MsgID)
			}
			seen[msgs[i].MsgID] = struct{}{}
		}
	}
	if dups != nil {
		return &DuplicateError{MsgIDs: dups}
	}
	return nil
}
