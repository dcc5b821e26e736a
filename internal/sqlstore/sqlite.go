package sqlstore

// sqliteDialect is all the SQL the outbox runs on SQLite 3.38+ (modernc.org/sqlite ships its own, newer). Times are UTC
// text in SQLite's own format ('YYYY-MM-DD HH:MM:SS.SSS'), which sorts as time.
// Every statement on the pending rows says "status = 0" as a literal so that
// the planner can use the partial index.
var sqliteDialect = dialect{
	name:  "sqlite",
	quote: quoteDouble,
	mode:  claimRange,

	insertOne: `INSERT INTO {{outbox}} (msg_id, topic, msg_key, payload, headers) VALUES (?, ?, ?, ?, ?)`,

	insertManyHead: `INSERT INTO {{outbox}} (msg_id, topic, msg_key, payload, headers) VALUES `,
	insertManyRow:  `(?, ?, ?, ?, ?)`,

	existing: `SELECT msg_id FROM {{outbox}} WHERE msg_id IN (SELECT value FROM json_each(?))`,

	consume: `INSERT INTO {{inbox}} (consumer_group, msg_id) VALUES (?, ?) ON CONFLICT DO NOTHING`,

	// A claim is one short write transaction: drop expired claims, read the
	// due rows outside every live claim's id range, record this claim's
	// range with its lease. The rows themselves are written once, when marked.
	claimExpire: `DELETE FROM {{claims}} WHERE until <= strftime('%Y-%m-%d %H:%M:%f', 'now')`,
	claim: `SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at
FROM {{outbox}} AS o
WHERE status = 0 AND id > ?1 AND next_retry_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
  AND NOT EXISTS (SELECT 1 FROM {{claims}} AS c WHERE o.id BETWEEN c.lo AND c.hi)
ORDER BY id LIMIT ?2`,
	claimRecord: `INSERT INTO {{claims}} (token, lo, hi, until)
VALUES (?1, ?2, ?3, strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', ?4 / 1000.0)))`,
	claimRelease: `DELETE FROM {{claims}} WHERE token = ?`,

	// OR FAIL spares SQLite a statement journal for these multi-row updates:
	// on any error the whole transaction is rolled back anyway.
	markSent: `UPDATE OR FAIL {{outbox}}
SET status = 1, sent_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE status = 0 AND id IN (SELECT value FROM json_each(?))`,

	// The other outcomes move only rows the claim (its token, the second
	// argument) still holds: a relay that outlived its lease leaves another
	// relay's claim alone.
	markOthers: `UPDATE OR FAIL {{outbox}} SET
  status        = CASE f.k WHEN 2 THEN 2 ELSE 0 END,
  retries       = retries + 1,
  next_retry_at = CASE f.k
    WHEN 1 THEN strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', f.d / 1000.0))
    ELSE next_retry_at END,
  last_error    = f.e,
  dead_at       = CASE f.k WHEN 2 THEN strftime('%Y-%m-%d %H:%M:%f', 'now') END
FROM (SELECT value ->> '$.id' AS id, value ->> '$.k' AS k, value ->> '$.d' AS d, value ->> '$.e' AS e
      FROM json_each(?)) AS f
WHERE {{outbox}}.id = f.id AND {{outbox}}.status = 0
  AND EXISTS (SELECT 1 FROM {{claims}} AS c WHERE c.token = ? AND {{outbox}}.id BETWEEN c.lo AND c.hi)`,

	statsPending: `SELECT topic, count(*), min(created_at), strftime('%Y-%m-%d %H:%M:%f', 'now')
FROM {{outbox}} WHERE status = 0 GROUP BY topic`,
	statsDead: `SELECT topic, count(*) FROM {{outbox}} WHERE status = 2 GROUP BY topic`,
	statsSpan: statsSpan,

	// backlog walks the partial pending index, deadCount the partial DEAD
	// index (schema version 3). Every statement on the DEAD rows says
	// "status = 2" as a literal, for that index.
	backlog:   `SELECT count(*), min(created_at), strftime('%Y-%m-%d %H:%M:%f', 'now') FROM {{outbox}} WHERE status = 0`,
	deadCount: `SELECT count(*) FROM {{outbox}} WHERE status = 2`,

	list: `SELECT id, msg_id, topic, msg_key, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at
FROM {{outbox}}
WHERE status = ?1 AND topic = COALESCE(NULLIF(?2, ''), topic) AND id > ?3
ORDER BY id LIMIT ?4`,
	listDead: `SELECT id, msg_id, topic, msg_key, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at
FROM {{outbox}}
WHERE status = 2 AND topic = COALESCE(NULLIF(?1, ''), topic) AND id > ?2
ORDER BY id LIMIT ?3`,

	get: `SELECT id, msg_id, topic, msg_key, payload, headers, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at
FROM {{outbox}} WHERE msg_id = ?`,

	// retryDead marks each row it moves with the header outboxretried (see
	// outbox.RetriedHeader): the time of the retry.
	retryDead: `UPDATE {{outbox}} SET status = 0, retries = 0, dead_at = NULL,
  next_retry_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
  headers = json_set(coalesce(headers, '{}'), '$.outboxretried', strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  last_error = ?1 || coalesce(last_error, '')
WHERE status = 2
  AND (msg_id IN (SELECT value FROM json_each(?2)) OR ?3)
  AND topic = COALESCE(NULLIF(?4, ''), topic)`,

	dropDead: `DELETE FROM {{outbox}}
WHERE status = 2
  AND (msg_id IN (SELECT value FROM json_each(?1)) OR ?2)
  AND topic = COALESCE(NULLIF(?3, ''), topic)`,

	deleteSent: `DELETE FROM {{outbox}} WHERE id IN (
  SELECT id FROM {{outbox}}
  WHERE status = 1 AND sent_at < strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', -?1 / 1000.0))
  ORDER BY id LIMIT ?2)`,

	// The inbox is WITHOUT ROWID: its rows are found by their primary key.
	deleteConsumed: `DELETE FROM {{inbox}} WHERE (consumer_group, msg_id) IN (
  SELECT consumer_group, msg_id FROM {{inbox}}
  WHERE consumed_at < strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', -?1 / 1000.0))
  LIMIT ?2)`,

	explain:  `EXPLAIN QUERY PLAN `,
	truncate: `DELETE FROM {{outbox}}`,

	migrationsTable: `CREATE TABLE IF NOT EXISTS {{migrations}} (
  version    INTEGER PRIMARY KEY,
  name       TEXT NOT NULL,
  applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')))`,
	schemaVersion: `SELECT coalesce(max(version), 0) FROM {{migrations}}`,
	recordVersion: `INSERT OR IGNORE INTO {{migrations}} (version, name) VALUES (?, ?)`,
}
