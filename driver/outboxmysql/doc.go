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
// instead of waiting) and moves their next_retry_at to the end of its lease,
// RelayConfig.Lease (twice PublishTimeout by default), so that no relay finds
// them due until then; the lease's end is the claim's token. After the
// broker has answered, the relay marks the rows by primary key, in a
// statement of its own: SENT (UPDATE ... WHERE id IN (...) AND status = 0),
// and the other outcomes only on rows whose next_retry_at is still its
// lease. The marks name rows by primary key, never through a join, because a
// join would scan and try to lock rows of other transactions, such as a slow
// writer's uncommitted insert, and wait for them. A relay that dies
// mid-batch leaves the rows NEW; they are due again, and published again,
// when the lease runs out. A relay that outlives its lease may find the rows
// claimed by another relay: its SENT mark still applies to rows still NEW,
// its other outcomes do not, and the consumers' inbox absorbs the second
// delivery.
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
