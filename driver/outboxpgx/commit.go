package outboxpgx

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/sqlstore"
)

// WriteOnCommit runs fn in a transaction of its own, then writes the
// messages fn returns and commits: the inserts and the COMMIT go to
// PostgreSQL together, in one round trip, so that the outbox costs the
// transaction no round trip of its own. (w.Write inside a transaction sends
// each insert by itself, one round trip per call, before the commit.)
//
// It is all or nothing: fn's changes and the messages commit together, or
// neither does.
//   - An error from fn, an error of one of w's write hooks (run over the
//     messages fn returns, by w.Prepare; see outbox.WriteHook), or messages
//     that w refuses (a *outbox.ValidationError, or a
//     *outbox.DuplicateError for a msg_id given twice), rolls the
//     transaction back before anything is written, and is returned (fn's
//     error as it is).
//   - A msg_id already in the table rolls the whole transaction back and
//     returns a *outbox.DuplicateError (errors.Is outbox.ErrDuplicate). This
//     differs from w.Write, which leaves the transaction usable after a
//     duplicate: here the duplicate is found only when the COMMIT is already
//     on its way.
//   - As with any commit, when the connection breaks, or ctx ends, after
//     the COMMIT was sent, whether it committed is not known; the error
//     says so (pgconn.SafeToRetry is false). Give the messages stable msg_ids, so
//     that running the whole transaction again is safe: a second attempt
//     after a commit that did happen gets the DuplicateError.
//
// fn gets a pgx.Tx on a connection taken from the driver's pool. fn may run
// any statement on it and use savepoints (tx.Begin), but must not commit or
// roll it back, nor keep it after it returns. With no messages WriteOnCommit
// is a plain transaction.
//
// After a commit that wrote messages it wakes the relays (Notify): the
// notification follows the COMMIT, outside the transaction.
func (d *Driver) WriteOnCommit(ctx context.Context, w *outbox.Writer[pgx.Tx], fn func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error)) error {
	if w == nil {
		return errors.New("outboxpgx: WriteOnCommit: the writer is nil")
	}
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("outboxpgx: WriteOnCommit: acquire a connection: %w", err)
	}
	// Release takes the connection back only when it is outside a
	// transaction; otherwise the pool closes it.
	defer c.Release()
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outboxpgx: WriteOnCommit: begin: %w", err)
	}
	msgs, err := fn(ctx, tx)
	if err == nil {
		msgs, err = w.Prepare(ctx, msgs...)
	}
	var b pgx.Batch
	for i := 0; err == nil && i < len(msgs); i++ {
		var stmt string
		var args []any
		if stmt, args, err = d.s.InsertOneStrict(&msgs[i]); err == nil {
			b.Queue(stmt, args...)
		}
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	b.Queue("commit")
	// The batch goes on the connection, not through tx: it ends the
	// transaction, which tx does not know; tx is not used again.
	conn := c.Conn()
	br := conn.SendBatch(ctx, &b)
	for i := 0; err == nil && i < len(msgs); i++ {
		if _, err = br.Exec(); err != nil {
			if classify(err) == sqlstore.ErrUnique {
				err = &outbox.DuplicateError{MsgIDs: []string{msgs[i].MsgID}}
			} else {
				err = sendError(ctx, fmt.Sprintf("insert message %q", msgs[i].MsgID), err)
			}
		}
	}
	if err == nil {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err != nil {
			err = sendError(ctx, "commit", err)
		} else if tag.String() == "ROLLBACK" {
			// fn swallowed an error that aborted the transaction.
			err = pgx.ErrTxCommitRollback
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = sendError(ctx, "commit", cerr)
	}
	if conn.PgConn().TxStatus() != 'I' {
		// A failed insert left the transaction aborted, and the COMMIT
		// behind it was never run.
		_ = tx.Rollback(ctx)
	}
	if err == nil && len(msgs) > 0 {
		d.Notify()
	}
	return err
}

// sendError describes an error of the batch that carries the COMMIT. When
// the connection failed, or ctx ended, once the batch had left
// (pgconn.SafeToRetry false), the server may have run it whole: the error
// says that whether the transaction committed is not known.
func sendError(ctx context.Context, what string, err error) error {
	if (classify(err) == sqlstore.ErrConnection || ctx.Err() != nil) && !pgconn.SafeToRetry(err) {
		return fmt.Errorf("outboxpgx: WriteOnCommit: %s: the connection failed after the COMMIT was sent, so whether the transaction committed is not known: %w", what, err)
	}
	return fmt.Errorf("outboxpgx: WriteOnCommit: %s: %w", what, err)
}
