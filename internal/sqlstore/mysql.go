package sqlstore

// mysqlDialect is all the SQL the outbox runs on MariaDB 10.6+ and MySQL 8.
// Times are UTC (UTC_TIMESTAMP), whatever the session's time zone.
var mysqlDialect = dialect{
	name:  "mysql",
	quote: quoteBacktick,
	mode:  claimRowLease,

	insertOne: `INSERT INTO {{outbox}} (msg_id, topic, msg_key, payload, headers) VALUES (?, ?, ?, ?, ?)`,

	insertManyHead: `INSERT INTO {{outbox}} (msg_id, topic, msg_key, payload, headers) VALUES `,
	insertManyRow:  `(?, ?, ?, ?, ?)`,

	existing: `SELECT o.msg_id FROM {{outbox}} o
JOIN JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$')) j ON o.msg_id = j.m`,

	// A duplicate is the key error (ErrUnique), which InnoDB rolls back
	// alone, leaving the transaction usable. Not ON DUPLICATE KEY UPDATE and
	// "0 rows affected": with clientFoundRows=true in the DSN MySQL counts
	// the duplicate as 1 row, the same as a new one.
	consume: `INSERT INTO {{inbox}} (consumer_group, msg_id) VALUES (?, ?)`,

	// A claim is a short READ COMMITTED transaction (Store.claimRows):
	// record locks on the claimed rows only, no gap locks where writers
	// insert, and none left once it commits, before the publish. The claim
	// locks the due rows (SKIP LOCKED: another relay's claim in progress
	// is passed over) and moves their next_retry_at to the end of the lease
	// (claimRecord), so that they are not due for any relay until then;
	// the lease's end is the claim's token. From the start (a rescan) the
	// claim goes through the pending index; from a cursor, which Relay.Run
	// keeps at the frontier, through the primary key, which at READ
	// COMMITTED InnoDB walks at twice the speed of the secondary index. The
	// ninth column is the database's clock, from which the lease runs.
	claim: `SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at, UTC_TIMESTAMP(6)
FROM {{outbox}}
WHERE status = 0 AND id > ? AND next_retry_at <= UTC_TIMESTAMP(6)
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`,
	claimAfter: `SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at, UTC_TIMESTAMP(6)
FROM {{outbox}} FORCE INDEX (PRIMARY)
WHERE status = 0 AND id > ? AND next_retry_at <= UTC_TIMESTAMP(6)
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`,
	claimRecord: `UPDATE {{outbox}} SET next_retry_at = ? WHERE id IN ({{ids}})`,
	// claimRelease gives the rows the lease still holds back, due at once.
	claimRelease: `UPDATE {{outbox}} SET next_retry_at = UTC_TIMESTAMP(6)
WHERE next_retry_at = ? AND id IN ({{ids}}) AND status = 0`,
	writeRelease: true,

	// Marks reach the rows by primary key only ({{ids}} expands to one
	// placeholder per id): a join would scan and lock rows of other
	// transactions, such as a late writer's uncommitted insert. The SENT
	// mark is one statement, its own transaction.
	// The lease leaves next_retry_at, so that a row set back to NEW by hand
	// is due at once.
	markSent: `UPDATE {{outbox}} SET status = 1, sent_at = UTC_TIMESTAMP(6), next_retry_at = UTC_TIMESTAMP(6)
WHERE id IN ({{ids}}) AND status = 0`,

	// k: 1 retry, 2 dead, 3 release. Only rows still NEW whose
	// next_retry_at is still this claim's lease (the ? after the JSON)
	// move: a relay that outlived its lease leaves another relay's claim
	// alone. A release is due again at once; the lease leaves a DEAD row's
	// next_retry_at too.
	markOthers: `UPDATE {{outbox}} o
JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$.id', k INT PATH '$.k', d BIGINT PATH '$.d', e TEXT PATH '$.e')) f ON o.id = f.id
SET o.status        = CASE f.k WHEN 2 THEN 2 ELSE 0 END,
    o.retries       = o.retries + CASE f.k WHEN 3 THEN 0 ELSE 1 END,
    o.next_retry_at = CASE f.k WHEN 1 THEN UTC_TIMESTAMP(6) + INTERVAL f.d * 1000 MICROSECOND ELSE UTC_TIMESTAMP(6) END,
    o.last_error    = CASE f.k WHEN 3 THEN o.last_error ELSE f.e END,
    o.dead_at       = CASE f.k WHEN 2 THEN UTC_TIMESTAMP(6) END
WHERE o.next_retry_at = ? AND o.id IN ({{ids}}) AND o.status = 0`,

	stats: `SELECT topic, status, count(*), min(created_at), UTC_TIMESTAMP(6)
FROM {{outbox}} GROUP BY topic, status ORDER BY topic, status`,

	// backlog and deadCount walk the pending index (status, id) for their
	// status only, never the SENT history. On a small table the optimizer
	// would rather scan it all than look up each pending row's created_at:
	// FORCE INDEX keeps the cost with the backlog when the table grows.
	backlog: `SELECT count(*), min(created_at), UTC_TIMESTAMP(6)
FROM {{outbox}} FORCE INDEX ({{outbox_pending_idx}}) WHERE status = 0`,
	deadCount: `SELECT count(*) FROM {{outbox}} WHERE status = 2`,

	list: `SELECT id, msg_id, topic, msg_key, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at
FROM {{outbox}}
WHERE status = ? AND topic = COALESCE(NULLIF(?, ''), topic) AND id > ?
ORDER BY id LIMIT ?`,

	get: `SELECT id, msg_id, topic, msg_key, payload, headers, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at
FROM {{outbox}} WHERE msg_id = ?`,

	retryDead: `UPDATE {{outbox}} SET status = 0, retries = 0, next_retry_at = UTC_TIMESTAMP(6), dead_at = NULL,
  last_error = CONCAT(?, coalesce(last_error, ''))
WHERE status = 2
  AND (msg_id IN (SELECT m FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$')) j) OR ?)
  AND topic = COALESCE(NULLIF(?, ''), topic)`,

	dropDead: `DELETE FROM {{outbox}}
WHERE status = 2
  AND (msg_id IN (SELECT m FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$')) j) OR ?)
  AND topic = COALESCE(NULLIF(?, ''), topic)`,

	// The cleanups read the keys of the rows to delete first, with a plain
	// SELECT, which locks nothing, and then delete those rows by primary
	// key, checking again under the row lock. A DELETE that finds its rows
	// itself locks every row it reads, even at READ COMMITTED (only an
	// UPDATE reads a locked row's last committed version instead), and on a
	// table of SENT rows the optimizer walks the primary key, so the last
	// statement of a cleanup waited for every writer's uncommitted row and
	// for every relay's claim. The delete joins the keys first (STRAIGHT_JOIN)
	// and reaches the rows by the primary key (FORCE INDEX), as the optimizer
	// does not on a small table.
	oldSent: `SELECT id FROM {{outbox}}
WHERE status = 1 AND sent_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY id LIMIT ?`,
	deleteSent: `DELETE o FROM JSON_TABLE(?, '$[*]' COLUMNS (i BIGINT PATH '$')) AS j
STRAIGHT_JOIN {{outbox}} AS o FORCE INDEX (PRIMARY) ON o.id = j.i
WHERE o.status = 1 AND o.sent_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`,
	oldConsumed: `SELECT consumer_group, msg_id FROM {{inbox}}
WHERE consumed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
LIMIT ?`,
	deleteConsumed: `DELETE i FROM JSON_TABLE(?, '$[*]' COLUMNS (g VARCHAR(64) PATH '$[0]', m VARCHAR(64) PATH '$[1]')) AS j
STRAIGHT_JOIN {{inbox}} AS i FORCE INDEX (PRIMARY) ON i.consumer_group = j.g AND i.msg_id = j.m
WHERE i.consumed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`,

	explain:  `EXPLAIN `,
	truncate: `TRUNCATE TABLE {{outbox}}`,

	migrationsTable: "CREATE TABLE IF NOT EXISTS {{migrations}} (\n" +
		"  version    INT PRIMARY KEY,\n" +
		"  name       VARCHAR(255) NOT NULL,\n" +
		"  applied_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6))) ENGINE=InnoDB",
	schemaVersion:   `SELECT coalesce(max(version), 0) FROM {{migrations}}`,
	recordVersion:   `INSERT IGNORE INTO {{migrations}} (version, name) VALUES (?, ?)`,
	lockMigrations:  `SELECT GET_LOCK(?, ?)`,
	unlockMigration: `SELECT RELEASE_LOCK(?)`,
	idList:          true,
}
