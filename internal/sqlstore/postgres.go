package sqlstore

// postgresDialect is all the SQL the outbox runs on PostgreSQL 13+.
var postgresDialect = dialect{
	name:  "postgres",
	quote: quoteDouble,
	mode:  claimLockMark,

	insertOne: `INSERT INTO {{outbox}} (msg_id, topic, msg_key, payload, headers)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (msg_id) DO NOTHING`,

	insertManyPG: `INSERT INTO {{outbox}} (msg_id, topic, msg_key, payload, headers)
SELECT m, t, NULLIF(k, ''), p::jsonb, NULLIF(h, '')::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS u(m, t, k, p, h, n)
ORDER BY n
ON CONFLICT (msg_id) DO NOTHING
RETURNING msg_id`,

	deleteInserted: `DELETE FROM {{outbox}} WHERE msg_id = ANY($1::text[])`,

	existing: `SELECT msg_id FROM {{outbox}} WHERE msg_id IN (SELECT jsonb_array_elements_text($1::jsonb))`,

	consume: `INSERT INTO {{inbox}} (consumer_group, msg_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,

	// Relays keep off each other's rows with transaction-scoped advisory
	// locks on chunks of 256 consecutive ids, taken as the index scan meets
	// each due row: a relay skips the rows of chunks another relay holds, and
	// marks its own SENT without locking them one by one. Row locks (FOR
	// UPDATE SKIP LOCKED) cost a WAL record per row and, measured here, made
	// two relays slower than one; chunk locks let them scale. The locks and
	// the SENT marks last until the transaction commits, after the broker
	// acks; a crash rolls both back. The CTE is materialized so that the lock
	// function runs only for the rows the index scan visits, in id order. The
	// lock key is the table's oid (resolved once per statement) and the chunk
	// number, so outbox tables in different schemas never share a chunk.
	//
	// The relay's own transaction need not be durable (set_config below): a
	// mark lost in a database crash only means the message is published once
	// more, which the consumers' inbox absorbs; the business transaction that
	// wrote the row was committed durably. This saves a WAL flush per batch,
	// and setting it inside the claim saves a round trip.
	claim: `WITH async AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'off', true)
), due AS MATERIALIZED (
  SELECT id FROM {{outbox}}
  WHERE status = 0 AND id > $1
    AND CASE WHEN next_retry_at <= now()
        THEN pg_try_advisory_xact_lock((SELECT '{{outbox}}'::regclass::oid::bigint << 31) | ((id >> 8) & 2147483647))
        ELSE false END
  ORDER BY id
  LIMIT $2
)
UPDATE {{outbox}} AS o SET status = 1, sent_at = now()
FROM due, async WHERE o.id = due.id AND o.status = 0
RETURNING o.id, o.msg_id, o.topic, o.msg_key, o.payload, o.headers, o.retries, o.created_at`,

	// k: 1 retry, 2 dead, 3 release (see outbox.OutcomeKind).
	markOthers: `UPDATE {{outbox}} AS o SET
  status        = CASE f.k WHEN 2 THEN 2 ELSE 0 END,
  sent_at       = NULL,
  retries       = o.retries + CASE f.k WHEN 3 THEN 0 ELSE 1 END,
  next_retry_at = CASE f.k WHEN 1 THEN now() + f.d * interval '1 millisecond' ELSE o.next_retry_at END,
  last_error    = CASE f.k WHEN 3 THEN o.last_error ELSE f.e END
FROM jsonb_to_recordset($1::jsonb) AS f(id bigint, k int, d bigint, e text)
WHERE o.id = f.id`,

	stats: `SELECT topic, status, count(*), min(created_at), now()
FROM {{outbox}} GROUP BY topic, status ORDER BY topic, status`,

	list: `SELECT id, msg_id, topic, msg_key, status, retries, next_retry_at, created_at, sent_at, last_error
FROM {{outbox}}
WHERE status = $1 AND topic = COALESCE(NULLIF($2, ''), topic) AND id > $3
ORDER BY id LIMIT $4`,

	get: `SELECT id, msg_id, topic, msg_key, payload, headers, status, retries, next_retry_at, created_at, sent_at, last_error
FROM {{outbox}} WHERE msg_id = $1`,

	retryDead: `UPDATE {{outbox}} SET status = 0, retries = 0, next_retry_at = now(),
  last_error = $1 || coalesce(last_error, '')
WHERE status = 2
  AND (msg_id IN (SELECT jsonb_array_elements_text($2::jsonb)) OR $3)
  AND topic = COALESCE(NULLIF($4, ''), topic)`,

	dropDead: `DELETE FROM {{outbox}}
WHERE status = 2
  AND (msg_id IN (SELECT jsonb_array_elements_text($1::jsonb)) OR $2)
  AND topic = COALESCE(NULLIF($3, ''), topic)`,

	deleteSent: `DELETE FROM {{outbox}} WHERE id IN (
  SELECT id FROM {{outbox}}
  WHERE status = 1 AND sent_at < now() - $1 * interval '1 millisecond'
  ORDER BY id LIMIT $2)`,

	explain:  `EXPLAIN `,
	truncate: `TRUNCATE {{outbox}}, {{inbox}}`,

	migrationsTable: `CREATE TABLE IF NOT EXISTS {{migrations}} (
  version    INT PRIMARY KEY,
  name       TEXT NOT NULL,
  applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
	schemaVersion:  `SELECT coalesce(max(version), 0) FROM {{migrations}}`,
	recordVersion:  `INSERT INTO {{migrations}} (version, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
	lockMigrations: `SELECT pg_advisory_xact_lock(hashtext($1))`,
}
