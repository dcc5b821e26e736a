package outbox

import (
	"context"
	"fmt"
)

// WriterConfig configures a Writer.
type WriterConfig struct {
	// MaxPayloadBytes is the largest payload accepted. Defaults to 1 MiB.
	MaxPayloadBytes int
}

// Writer inserts messages inside the caller's own transaction, so that the
// message commits or rolls back with the business change it describes.
type Writer[TTx any] struct {
	driver   Driver[TTx]
	maxBytes int
}

// NewWriter returns a Writer that inserts through driver.
func NewWriter[TTx any](driver Driver[TTx], cfg WriterConfig) (*Writer[TTx], error) {
	if driver == nil {
		return nil, fmt.Errorf("outbox: NewWriter: driver is nil")
	}
	if cfg.MaxPayloadBytes < 0 {
		return nil, fmt.Errorf("outbox: NewWriter: MaxPayloadBytes is %d; it must be positive (or 0 for the default)", cfg.MaxPayloadBytes)
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = DefaultMaxBytes
	}
	return &Writer[TTx]{driver: driver, maxBytes: cfg.MaxPayloadBytes}, nil
}

// Write validates msgs and inserts them in tx, all or none.
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
	if len(msgs) == 0 {
		return nil
	}
	if err := w.Validate(msgs...); err != nil {
		return err
	}
	return w.driver.InsertTx(ctx, tx, msgs)
}

// Validate checks msgs as Write does, without inserting them: a
// *ValidationError for a message that breaks a limit, a *DuplicateError for a
// msg_id repeated in msgs. Only the database can tell a msg_id already in the
// table. Write calls it; a driver's own way of inserting (outboxpgx's
// QueueWrite) does too.
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
