// Package outboxmysql is the outbox's MariaDB (10.6 or later) and MySQL
// (8.0.17 or later) driver on go-sql-driver/mysql. It is a module of its own,
// so that only programs that use MySQL compile its client:
//
//	go get github.com/outbox-go/outbox/driver/outboxmysql
//
// [New] takes a *sql.DB opened with the "mysql" driver; the outbox's Writer
// and Inbox then take a *sql.Tx.
//
// # Connecting
//
// Three DSN parameters matter:
//
//   - parseTime=true makes the driver return DATETIME columns as time.Time.
//   - loc=UTC (the driver's default) must stay UTC: the tables hold UTC
//     times, written with UTC_TIMESTAMP whatever the session's time zone, and
//     any other location would shift created_at and the ages in Stats.
//   - interpolateParams=true lets the driver put the arguments into the
//     statement itself instead of preparing it on the server first, which
//     saves two round trips per statement. The driver escapes the values
//     itself, and refuses the option for the few multi-byte character sets
//     (such as GBK) where that would be unsafe; utf8mb4 is fine.
//
// A DSN with all three:
//
//	app:secret@tcp(db.internal:3306)/shop?parseTime=true&loc=UTC&interpolateParams=true
//
// msg_id and consumer_group use a NO PAD binary collation (schema version 3:
// utf8mb4_nopad_bin on MariaDB, utf8mb4_0900_bin on MySQL 8), so they
// compare byte for byte, trailing spaces included, as on the other
// databases; utf8mb4_bin, which the tables' other text columns use, ignores
// trailing spaces, and "m" and "m " would be one message.
//
// # How a claim works
//
// A relay's claim is one short READ COMMITTED transaction that commits
// before the batch is published, so that no transaction stays open while
// the broker has it (a wait_timeout or idle_transaction_timeout shorter than
// a publish cannot end a claim). It locks the due rows with SELECT ... ORDER
// BY id LIMIT n FOR UPDATE SKIP LOCKED (other relays skip rows being claimed
// instead of waiting), passing over rows that a live lease holds, and records
// a lease for each row it took, RelayConfig.Lease (twice PublishTimeout by
// default), in <outbox>_claims (schema version 4). That table is a MEMORY
// table: its rows are seen by every relay the moment they are written, before
// the claim commits and unlocks its rows, so a row is never claimed twice,
// and the claim writes nothing InnoDB must flush at commit. A server restart
// forgets the leases, and the batches in flight are published once more.
// Galera does not replicate MEMORY tables: relays connected to different
// nodes of such a cluster do not see each other's leases.
//
// After the broker has answered, the relay marks the rows by primary key, in
// a statement of its own (UPDATE ... WHERE id IN (...) AND status = 0), and
// drops its leases; the other outcomes (a retry spent, DEAD) apply only to
// rows its lease still holds. The marks name rows by primary key, never
// through a join, because a join would scan and try to lock rows of other
// transactions, such as a slow writer's uncommitted insert, and wait for
// them. A relay that dies mid-batch leaves the rows NEW; they are claimed,
// and published, again when its lease runs out. A relay that outlives its
// lease may find the rows claimed by another relay: its SENT mark still
// applies to rows still NEW (status only moves forward, and a row is never
// marked twice), its other outcomes do not, and the consumers' inbox absorbs
// the second delivery.
//
// # The binary log
//
// [Driver.WithBinlog] returns a [BinlogDriver], which reads the outbox
// table's inserts from the server's binary log as a replica does: the
// relay's outboxdriver.Watcher (it looks for rows at every commit, whoever wrote
// them) and an outboxdriver.Streamer (the rows themselves, in commit order). The
// server needs log_bin, binlog_format=ROW and binlog_row_image=FULL, and the
// user REPLICATION SLAVE and REPLICATION CLIENT (MariaDB 10.5 and later:
// BINLOG MONITOR); without them both return an error matching
// outboxdriver.ErrStreamUnavailable, and the relay polls.
//
// # Errors and migrations
//
// InnoDB rolls back only the failing statement on a duplicate key, so a
// duplicate msg_id comes back as outbox.ErrDuplicate and the caller's
// transaction stays usable. The driver translates error 1062 (duplicate) and
// 1146 (no such table, outbox.ErrSchemaMissing).
//
// MySQL commits each CREATE TABLE on its own, so a migration is not atomic.
// Migrate serialises concurrent runs with GET_LOCK, and its statements are
// idempotent, so running it again completes one that was interrupted.
package outboxmysql
