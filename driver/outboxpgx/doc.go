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
// # Writing without a round trip of its own
//
// Writer.Write sends its insert as a statement of its own, one round trip
// before the commit. Two ways save it with pgx: [Driver.QueueWrite] puts the
// insert in a pgx.Batch of the caller's own statements, and
// [Driver.WriteOnCommit] runs the caller's transaction and sends the inserts
// together with its COMMIT. With either, a duplicate msg_id fails the
// transaction (with WriteOnCommit the duplicate is found only when the
// COMMIT is already on its way; with QueueWrite it fails the batch, however
// its results are read); with Write the transaction goes on. Both run the
// Writer's write hooks (outbox.WriteHook), as Write does.
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
// A relay's claim is one short transaction that commits before the batch is
// published, so that no transaction stays open while the broker has it: a
// server's idle_in_transaction_session_timeout, or a pooler's idle timeout,
// shorter than a publish cannot end a claim. One statement walks the due
// rows in id order, takes a transaction-scoped advisory lock on each chunk of
// 256 consecutive ids it meets (pg_try_advisory_xact_lock, keyed by the
// table's oid and the chunk number), skips chunks another relay is claiming
// or holds under a live lease, and records the chunks it takes in
// <outbox>_claims (schema version 6; an UNLOGGED table) with a random token
// and the end of its lease, RelayConfig.Lease (twice PublishTimeout by
// default). Each chunk's record carries a generation, which every claim and
// release moves on: a claim whose snapshot is older than the chunk's last
// change leaves the chunk and looks again. The message rows are not written
// by the claim; they stay NEW. With pgx's pool the claim's transaction goes
// to the server in one round trip.
//
// After the broker has answered, the relay marks the rows in a statement of
// its own, which also releases the chunks: SENT, reaching each row by the
// ctid the claim read and checking its id, only where the row is still NEW;
// the other outcomes (a retry spent, DEAD) only on rows still NEW in chunks
// the claim still holds. So several relays share a table without publishing
// the same row twice, and without waiting for each other. A relay that dies
// mid-batch leaves its chunks to run out of their lease; the rows are NEW
// and are published again. A relay that outlives its lease may find the
// rows claimed by another relay: its SENT mark still applies to rows still
// NEW (status only moves forward, and a row is never marked twice), its
// other outcomes do not, and the consumers' inbox absorbs the second
// delivery.
//
// Chunks replace FOR UPDATE SKIP LOCKED, which locks, and writes a WAL
// record for, every row: with row locks two relays were slower than one,
// with chunk locks they are not (docs/performance.md). The locks share PostgreSQL's 64-bit advisory lock space with the
// application's own pg_advisory_lock(bigint) calls; the keys are the table's
// oid shifted left by 31 bits, so a collision would need an application key
// of that shape, and would only delay a chunk.
//
// # Finding pending rows without a status index
//
// Since schema version 2 no index mentions status, so the SENT update is a
// HOT update: PostgreSQL writes the new row version on the same page (the
// table's fillfactor of 50 leaves room for it) and inserts no index entry,
// and the writer maintains one index fewer (docs/performance.md gives the
// gain). The relay finds rows:
//
//   - past its cursor, by walking the primary key;
//   - that were put back after a claim (a retry, a release, an operator's
//     dead retry, or an UPDATE ... SET status = 0 by hand, whose
//     next_retry_at a trigger moves past created_at; schema version 7),
//     through the index <outbox>_requeued_idx, which holds the
//     rows whose next_retry_at is past their created_at; marking a row SENT
//     or DEAD sets next_retry_at back to created_at (a DEAD row records when
//     in dead_at), so the index holds only rows waiting for another try;
//   - that committed late (a transaction that took its id before rows with
//     higher ids committed), or were claimed by a relay that then died, by
//     walking the primary key from a low-water mark kept in <outbox>_horizon.
//
// The mark only passes an id once it is sure no row will ever commit there
// unseen: a sweep reads the highest visible id and lists the transactions
// running at that moment (their virtual transaction ids in pg_locks: every
// transaction holds its own from its start, before it takes an id); once all
// of them have ended, a later statement, whose snapshot sees whatever they
// committed, moves the mark to just below the first pending row up to that
// id. This rests on ids coming from the table's identity sequence with its
// default CACHE 1, so that a smaller id is always taken before a larger one:
// do not give the sequence a cache (a relay finds it at its first rescan and
// refuses, naming the ALTER TABLE that fixes it), and do not insert explicit
// ids. A
// transaction left open, or a prepared (two-phase) transaction in the
// database, holds the mark back until it ends, which costs rescans more of
// the primary key, not correctness; a relay's role needs no privilege for
// this (other roles' backends, whose kind it cannot see, count).
//
// Restarting the identity (TRUNCATE ... RESTART IDENTITY, ALTER TABLE ...
// ALTER COLUMN id RESTART) gives its sequence a new relfilenode, which the
// mark records (schema version 3): the next sweep starts the mark again from
// 0. Do not set the sequence back with setval: that the mark notices only
// while the highest id is still below it.
//
// Each claim's transaction sets enable_seqscan, enable_bitmapscan and
// enable_sort off (and jit, which the resulting costs would trigger), so that
// the claims walk their indexes whatever the table's statistics say.
//
// The claim's and the mark's transactions commit with synchronous_commit =
// off, which saves a write-ahead-log flush per batch. That is safe because
// they only record a lease or a delivery that already happened: if a
// database crash loses either, the message is published once more, and the
// consumers' inbox absorbs the duplicate. The business transaction that wrote the message is not
// affected and commits as durably as the application's settings say.
//
// # Errors
//
// PostgreSQL aborts a transaction at its first error. Inserts therefore use
// ON CONFLICT DO NOTHING, so that a duplicate msg_id comes back as
// outbox.ErrDuplicate while the caller's transaction stays usable, as the
// Writer promises. Other errors, such as a missing table
// (outbox.ErrSchemaMissing, translated from SQLSTATE 42P01),
// abort the transaction as usual. Migrate takes an advisory lock, so that
// several processes may run it at once.
package outboxpgx
