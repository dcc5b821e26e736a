// Package outboxsqlite is the outbox's SQLite driver on modernc.org/sqlite,
// which is pure Go and embeds SQLite itself: no cgo, no C compiler and no
// system library needed. It is a module of its own, so that only programs that
// use SQLite compile it:
//
//	go get github.com/outbox-go/outbox/driver/outboxsqlite
//
// [New] takes a *sql.DB opened with the "sqlite" driver; the outbox's Writer
// and Inbox then take a *sql.Tx.
//
// # Opening the database
//
// Use [Open], which opens the file with the settings the outbox relies on:
//
//   - the WAL journal, so that reads never wait for the writer;
//   - synchronous=NORMAL, which survives a crash of the program; a power
//     failure may lose the last commits, but a business change and its
//     message are lost together, so the outbox still agrees with the data;
//   - a busy timeout, so that a writer waits for the write lock instead of
//     failing at once;
//   - IMMEDIATE transactions, so that a transaction takes the write lock when
//     it begins and two writers queue up, instead of one of them failing with
//     SQLITE_BUSY when it tries to upgrade its read to a write;
//   - a write gate, so that the writers of the file in this process queue in
//     Go instead of polling SQLite's lock (see [WriteGate], on by default).
//
// A database opened some other way should use the same pragmas and
// _txlock=immediate; it has no write gate.
//
// SQLite has one writer at a time: each business transaction holds the write
// lock until it commits, and the relay takes it briefly to claim and to mark.
// Several processes on one machine may share the file; a network file system
// may not host it, because WAL needs shared memory.
//
// # How a claim works
//
// SQLite has no row locks, so relays coordinate through a third table,
// <outbox>_claims (outbox_claims by default), which Migrate creates next to
// the other two. A claim is one short write transaction: it deletes expired
// claims, reads the due rows, in id order, that lie outside every live
// claim's id range, and records its own range of ids with a lease of
// RelayConfig.Lease (twice PublishTimeout by default). The message rows are
// written once, when the relay marks them after the broker has answered, in
// a transaction that also deletes the claim.
//
// A relay that dies leaves its claim behind until the lease runs out; then
// another relay claims the rows again. A relay that outlives its lease may
// mark SENT rows that another relay has claimed since; every mark is guarded
// by status = 0, so status still only moves forward, and the consumers'
// inbox absorbs the second delivery. Its other outcomes (a retry spent,
// DEAD) apply only while its claim is still recorded.
//
// Times are stored as UTC text in SQLite's own format, which sorts as time.
package outboxsqlite
