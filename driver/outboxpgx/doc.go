// Package outboxpgx is the outbox's PostgreSQL (13 or later) driver on
// jackc/pgx v5. It is a module of its own, so that only programs that use
// PostgreSQL compile pgx:
//
//	go get github.com/outbox-go/outbox/driver/outboxpgx
//
// # Two ways in
//
// [New] takes a *pgxpool.Pool; the outbox's Writer and Inbox then take a
// pgx.Tx, the transaction a pgx application already has. [NewStdlib] takes a
// *sql.DB opened with pgx's database/sql adapter (import
// github.com/jackc/pgx/v5/stdlib and open with the driver name "pgx"); the
// Writer and Inbox then take a *sql.Tx. Both run the same SQL and pass the
// same shared suite.
//
// # Connecting
//
// Any pgx connection string works; no option is required. The tables are
// named without a schema, so they live in the first schema of the
// connection's search_path. To keep them in a schema of their own, set it in
// the DSN:
//
//	postgres://app@db.internal:5432/shop?search_path=messaging
//
// A relay holds one connection from the pool for each batch, from the claim
// until the outcome is recorded (at most about twice RelayConfig.PublishTimeout),
// so size the pool for the relays as well as for the application.
//
// # How a claim works
//
// A relay claims in a transaction of its own: one statement walks the due
// rows in id order, takes a transaction-scoped advisory lock on each chunk of
// 256 consecutive ids it meets (pg_try_advisory_xact_lock, keyed by the
// table's oid and the chunk number), skips the rows of chunks another relay
// holds, and marks the rest SENT. The transaction stays open while the batch
// is published; before it commits, the messages the broker did not
// acknowledge are put back to NEW (with a retry spent, or DEAD, or untouched
// when the broker was unreachable). So several relays share a table without
// publishing the same row twice, and without waiting for each other. A relay
// that dies mid-batch leaves a transaction that PostgreSQL rolls back: its
// locks are released and the rows are NEW again, to be published again.
//
// Chunk locks replace FOR UPDATE SKIP LOCKED, which locks, and writes a WAL
// record for, every row: measured on a 2-core machine, two relays with row
// locks were slower than one (0.8×), with chunk locks they are not (1.0 to
// 1.3×). The locks share PostgreSQL's 64-bit advisory lock space with the
// application's own pg_advisory_lock(bigint) calls; the keys are the table's
// oid shifted left by 31 bits, so a collision would need an application key
// of that shape, and would only delay a chunk.
//
// The claim's transaction commits with synchronous_commit = off, which saves a
// write-ahead-log flush per batch. That is safe because the transaction only
// records a delivery that already happened: if a database crash loses the
// mark, the message is published once more, and the consumers' inbox absorbs
// the duplicate. The business transaction that wrote the message is not
// affected and commits as durably as the application's settings say.
//
// # Errors
//
// PostgreSQL aborts a transaction at its first error. Inserts therefore use
// ON CONFLICT DO NOTHING, so that a duplicate msg_id comes back as
// outbox.ErrDuplicate while the caller's transaction stays usable, as the
// Writer promises. Other errors, such as a missing table
// (outbox.ErrSchemaMissing, translated from SQLSTATE 42P01 by [Classify]),
// abort the transaction as usual. Migrate takes an advisory lock, so that
// several processes may run it at once.
package outboxpgx
