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
	// insert, and none left once it commits, before the publish. It locks
	// the due rows that no live lease in {{claims}} holds (SKIP LOCKED: rows
	// another relay is claiming are passed over) and records one lease per
	// row (claimRecord). {{claims}} is a MEMORY table, not transactional:
	// a claim's leases are there for every relay before the claim commits
	// and unlocks its rows, and InnoDB applies the lease test to a row only
	// once it holds its lock, so a row is never claimed twice. From the
	// start (a rescan) the claim goes through the pending index; from a
	// cursor, which Relay.Run keeps at the frontier, through the primary
	// key, which at READ COMMITTED InnoDB walks at twice the speed of the
	// secondary index.
	claim: `SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at
FROM {{outbox}} AS o
WHERE status = 0 AND id > ? AND next_retry_at <= UTC_TIMESTAMP(6)
  AND NOT EXISTS (SELECT 1 FROM {{claims}} AS c WHERE c.id = o.id AND c.until > UTC_TIMESTAMP(6))
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`,
	claimAfter: `SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at
FROM {{outbox}} AS o FORCE INDEX (PRIMARY)
WHERE status = 0 AND id > ? AND next_retry_at <= UTC_TIMESTAMP(6)
  AND NOT EXISTS (SELECT 1 FROM {{claims}} AS c WHERE c.id = o.id AND c.until > UTC_TIMESTAMP(6))
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`,
	// args: a JSON array of the ids, the token, the lease in microseconds.
	// A lease that ran out is taken over.
	claimRecord: `INSERT INTO {{claims}} (id, token, until)
SELECT j.i, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
FROM JSON_TABLE(?, '$[*]' COLUMNS (i BIGINT PATH '$')) AS j
ON DUPLICATE KEY UPDATE token = VALUES(token), until = VALUES(until)`,
	// A rescan drops the leases that ran out first.
	claimExpire:  `DELETE FROM {{claims}} WHERE until <= UTC_TIMESTAMP(6)`,
	claimRelease: `DELETE FROM {{claims}} WHERE token = ?`,

	// Marks reach the rows by primary key only ({{ids}} expands to one
	// placeholder per id): a join would scan and lock rows of other
	// transactions, such as a late writer's uncommitted insert. The SENT
	// mark is one statement, its own transaction.
	markSent: `UPDATE {{outbox}} SET status = 1, sent_at = UTC_TIMESTAMP(6)
WHERE id IN ({{ids}}) AND status = 0`,

	// k: 1 retry, 2 dead. Only rows still NEW that the claim (its token,
	// the ? after the JSON) still holds move: a relay that outlived its
	// lease leaves another relay's claim alone.
	markLock: `SELECT id FROM {{outbox}} WHERE id IN ({{ids}}) FOR UPDATE`,
	markOthers: `UPDATE {{outbox}} o
JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$.id', k INT PATH '$.k', d BIGINT PATH '$.d', e TEXT PATH '$.e')) f ON o.id = f.id
SET o.status        = CASE f.k WHEN 2 THEN 2 ELSE 0 END,
    o.retries       = o.retries + 1,
    o.next_retry_at = CASE f.k WHEN 1 THEN UTC_TIMESTAMP(6) + INTERVAL f.d * 1000 MICROSECOND ELSE o.next_retry_at END,
    o.last_error    = f.e,
    o.dead_at       = CASE f.k WHEN 2 THEN UTC_TIMESTAMP(6) END
WHERE EXISTS (SELECT 1 FROM {{claims}} AS c WHERE c.id = o.id AND c.token = ?)
  AND o.id IN ({{ids}}) AND o.status = 0`,

	statsPending: `SELECT topic, count(*), min(created_at), UTC_TIMESTAMP(6)
FROM {{outbox}} FORCE INDEX ({{outbox_pending_idx}}) WHERE status = 0 GROUP BY topic`,
	statsDead: `SELECT topic, count(*) FROM {{outbox}} FORCE INDEX ({{outbox_pending_idx}}) WHERE status = 2 GROUP BY topic`,
	statsSpan: statsSpan,

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

	// retryDead marks each row it moves with the header outboxretried (see
	// outbox.RetriedHeader): the time of the retry.
	retryDead: `UPDATE {{outbox}} SET status = 0, retries = 0, next_retry_at = UTC_TIMESTAMP(6), dead_at = NULL,
  headers = JSON_SET(COALESCE(headers, JSON_OBJECT()), '$.outboxretried', DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%fZ')),
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
