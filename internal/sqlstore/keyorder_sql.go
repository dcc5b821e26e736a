package sqlstore

// postgresKeyOrder: no index may name status (the SENT update must stay
// HOT), so the key's index is (msg_key, id) WHERE msg_key IS NOT NULL, and
// blockers bounds its walk with the low-water mark, or with the key's done
// id (lo, outbox.HoldParams.Done) where that is higher: every NEW row at or
// below either that is not requeued has gone, so a key's blockers are its
// NEW rows between that bound and the batch (the index walk reads the key's
// rows of that window, SENT ones included, and stops after n+1 NEW ones: at
// most n are the batch's own) and its requeued rows below the batch, walked
// the same way through the requeued rows' key index (version 10), a branch
// skipped when that index holds no row at all.
// The window is written as two row comparisons on (msg_key, id), which
// together say msg_key = k and mark < id < hi, and which only the key's
// index can use, as the bounds of its walk: a plain "id > mark AND id < hi"
// would let the planner walk the primary key over the window (every key's
// rows) once per key, and "msg_key = k" beside the row comparisons made
// the index walk start at the key's first row, its whole history. "msg_key
// IS NOT NULL" matches the index's predicate. The walk is ordered by
// (msg_key, id), the key index's order, which the primary key cannot give:
// "ORDER BY id LIMIT n" made the planner walk the primary key instead, the
// whole table once per key.
// DEAD rows come from the DEAD index, in a branch fenced (OFFSET 0) so that
// it walks its own small index and is joined to the batch's keys by hash,
// never walking a key's history through the key index. Args: a JSON array of {k, hi, n, lo}; 2 when DEAD rows block (else 3).
//
// hold sets a held row's next_retry_at to its blocker's, but past its
// created_at, so that the row enters the requeued index and rescans still
// find it below the low-water mark. Args: a JSON array of [id, blocker];
// the wait behind a DEAD blocker in ms; the wait behind a blocker that waits
// out a backoff in ms.
//
// releaseAfter walks each key's rows above the marked one through the key's
// index, bounded by row comparisons as blockers' window is: those rows are
// the held ones, not the key's history. Args: a JSON array of [key, id].
var postgresKeyOrder = keyOrderSQL{
	blockersSetup: `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true), set_config('jit', 'off', true)`,
	blockers: `WITH m AS MATERIALIZED (
  SELECT coalesce((` + backlogMark + `), 0) AS lwm,
    EXISTS (SELECT 1 FROM {{outbox}} AS q WHERE q.next_retry_at > q.created_at AND q.msg_key IS NOT NULL) AS requeued
), b AS MATERIALIZED (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS b(k text, hi bigint, n int, lo bigint)
)
SELECT b.k, x.id FROM b CROSS JOIN LATERAL (
  SELECT o.id FROM {{outbox}} AS o
  WHERE o.msg_key IS NOT NULL AND o.status = 0
    AND (o.msg_key, o.id) > (b.k, greatest((SELECT lwm FROM m), coalesce(b.lo, 0))) AND (o.msg_key, o.id) < (b.k, b.hi)
  ORDER BY o.msg_key, o.id LIMIT b.n + 1) AS x
UNION ALL
SELECT b.k, r.id FROM b CROSS JOIN LATERAL (
  SELECT o.id FROM {{outbox}} AS o
  WHERE o.next_retry_at > o.created_at AND o.msg_key IS NOT NULL AND o.status = 0
    AND (o.msg_key, o.id) > (b.k, 0) AND (o.msg_key, o.id) < (b.k, b.hi)
  ORDER BY o.msg_key, o.id LIMIT b.n + 1) AS r
WHERE (SELECT requeued FROM m)
UNION ALL
SELECT d.msg_key, d.id FROM (
  SELECT o.msg_key, o.id FROM {{outbox}} AS o
  WHERE o.dead_at IS NOT NULL AND o.status = 2 AND $2::int = 2 AND o.msg_key IS NOT NULL
  OFFSET 0) AS d JOIN b ON b.k = d.msg_key`,
	hold: `UPDATE {{outbox}} AS o SET next_retry_at = greatest(CASE b.status
    WHEN 0 THEN CASE WHEN b.next_retry_at > clock_timestamp()
      THEN clock_timestamp() + $3 * interval '1 millisecond' ELSE b.next_retry_at END
    WHEN 2 THEN clock_timestamp() + $2 * interval '1 millisecond'
    ELSE clock_timestamp() END, o.created_at + interval '1 microsecond')
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS blocker FROM jsonb_array_elements($1::jsonb) AS e) AS f
JOIN {{outbox}} AS b ON b.id = f.blocker
WHERE o.id = f.id AND o.status = 0`,
	deadKeys: `SELECT DISTINCT msg_key FROM {{outbox}}
WHERE ` + deadRows + ` AND msg_key IS NOT NULL
  AND (msg_id IN (SELECT jsonb_array_elements_text($1::jsonb)) OR $2)
  AND topic = COALESCE(NULLIF($3, ''), topic)`,
	release: `UPDATE {{outbox}} SET next_retry_at = greatest(now(), created_at + interval '1 microsecond')
WHERE next_retry_at > created_at AND next_retry_at > now() AND status = 0
  AND msg_key IN (SELECT jsonb_array_elements_text($1::jsonb))`,
	releaseAfter: `UPDATE {{outbox}} AS o SET next_retry_at = greatest(now(), o.created_at + interval '1 microsecond')
FROM (
  SELECT x.id FROM (SELECT e->>0 AS k, (e->>1)::bigint AS id FROM jsonb_array_elements($1::jsonb) AS e) AS f
  CROSS JOIN LATERAL (
    SELECT r.id FROM {{outbox}} AS r
    WHERE r.msg_key IS NOT NULL AND r.status = 0
      AND (r.msg_key, r.id) > (f.k, f.id) AND (r.msg_key, r.id) < (f.k, 9223372036854775807)
      AND r.next_retry_at > now()
    ORDER BY r.msg_key, r.id) AS x
) AS h
WHERE o.id = h.id AND o.status = 0 AND o.next_retry_at > now()`,
}

// mysqlKeyOrder: the marks already change an indexed status column, so the
// key's index is (msg_key, status, id) and blockers reads only a key's NEW
// (or DEAD) rows. It returns the batch's spelling of the key: msg_key
// compares with PAD SPACE, so "k" and "k " are one key here. Args: the JSON
// array of {k, hi, n}, again, then 2 when DEAD rows block (else 3).
//
// hold does not read the blockers' rows itself: an UPDATE that joins them
// takes a shared lock on each, and a blocker's failed mark, which holds the
// MEMORY lease table's lock while it waits for its row, then closes a cycle
// with a claim (its rows, then the lease table) that InnoDB cannot see. So
// blockerState reads them first without a lock, and hold takes their status
// and next_retry_at as values: [id, status, next_retry_at] per held row.
var mysqlKeyOrder = keyOrderSQL{
	blockers: `SELECT b.k, o.id FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(128) PATH '$.k', hi BIGINT PATH '$.hi')) AS b
STRAIGHT_JOIN {{outbox}} AS o FORCE INDEX ({{outbox_key_idx}}) ON o.msg_key = b.k AND o.status = 0 AND o.id < b.hi
UNION ALL
SELECT b.k, o.id FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(128) PATH '$.k', hi BIGINT PATH '$.hi')) AS b
STRAIGHT_JOIN {{outbox}} AS o FORCE INDEX ({{outbox_key_idx}}) ON o.msg_key = b.k AND o.status = ? AND o.id < b.hi`,
	blockerState: `SELECT id, status, DATE_FORMAT(next_retry_at, '%Y-%m-%d %H:%i:%s.%f') FROM {{outbox}}
WHERE id IN (SELECT b FROM JSON_TABLE(?, '$[*]' COLUMNS (b BIGINT PATH '$[1]')) AS j)`,
	hold: `UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$[0]', s INT PATH '$[1]', t DATETIME(6) PATH '$[2]')) AS f
STRAIGHT_JOIN {{outbox}} AS o FORCE INDEX (PRIMARY) ON o.id = f.id
SET o.next_retry_at = CASE f.s
    WHEN 0 THEN IF(f.t > UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND, f.t)
    WHEN 2 THEN UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND
    ELSE UTC_TIMESTAMP(6) END
WHERE o.status = 0`,
	deadKeys: `SELECT DISTINCT msg_key FROM {{outbox}}
WHERE status = 2 AND msg_key IS NOT NULL
  AND (msg_id IN (SELECT m FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$')) j) OR ?)
  AND topic = COALESCE(NULLIF(?, ''), topic)`,
	release: `UPDATE {{outbox}} SET next_retry_at = UTC_TIMESTAMP(6)
WHERE status = 0 AND next_retry_at > UTC_TIMESTAMP(6)
  AND msg_key IN (SELECT k FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(128) PATH '$')) AS j)`,
	releaseAfter: `UPDATE JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(128) PATH '$[0]', id BIGINT PATH '$[1]')) AS f
STRAIGHT_JOIN {{outbox}} AS o FORCE INDEX ({{outbox_key_idx}}) ON o.msg_key = f.k AND o.status = 0 AND o.id > f.id
SET o.next_retry_at = UTC_TIMESTAMP(6)
WHERE o.next_retry_at > UTC_TIMESTAMP(6)`,
}

// sqliteKeyOrder: as MySQL, an index on (msg_key, status, id), here partial
// on msg_key IS NOT NULL, so rows without a key are not in it. Args: the
// JSON array of {k, hi, n}, then 2 when DEAD rows block (else 3).
var sqliteKeyOrder = keyOrderSQL{
	blockers: `SELECT b.value ->> '$.k', o.id FROM json_each(?1) AS b
CROSS JOIN {{outbox}} AS o INDEXED BY {{outbox_key_idx}}
WHERE o.msg_key = b.value ->> '$.k' AND o.status IN (0, ?2) AND o.id < b.value ->> '$.hi'`,
	hold: `UPDATE OR FAIL {{outbox}} SET next_retry_at = coalesce((
    SELECT CASE b.status
      WHEN 0 THEN CASE WHEN b.next_retry_at > strftime('%Y-%m-%d %H:%M:%f', 'now')
        THEN strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', ?3 / 1000.0)) ELSE b.next_retry_at END
      WHEN 2 THEN strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', ?2 / 1000.0))
      ELSE strftime('%Y-%m-%d %H:%M:%f', 'now') END
    FROM {{outbox}} AS b WHERE b.id = f.b), strftime('%Y-%m-%d %H:%M:%f', 'now'))
FROM (SELECT value ->> '$[0]' AS id, value ->> '$[1]' AS b FROM json_each(?1)) AS f
WHERE {{outbox}}.id = f.id AND {{outbox}}.status = 0`,
	deadKeys: `SELECT DISTINCT msg_key FROM {{outbox}}
WHERE status = 2 AND msg_key IS NOT NULL
  AND (msg_id IN (SELECT value FROM json_each(?1)) OR ?2)
  AND topic = COALESCE(NULLIF(?3, ''), topic)`,
	release: `UPDATE OR FAIL {{outbox}} SET next_retry_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE status = 0 AND next_retry_at > strftime('%Y-%m-%d %H:%M:%f', 'now')
  AND msg_key IN (SELECT value FROM json_each(?1))`,
	releaseAfter: `UPDATE OR FAIL {{outbox}} SET next_retry_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE status = 0 AND next_retry_at > strftime('%Y-%m-%d %H:%M:%f', 'now')
  AND id IN (SELECT o.id FROM json_each(?1) AS f
    CROSS JOIN {{outbox}} AS o INDEXED BY {{outbox_key_idx}}
    WHERE o.msg_key = f.value ->> '$[0]' AND o.status = 0 AND o.id > f.value ->> '$[1]')`,
}

// deadRows is how postgresKeyOrder names the DEAD rows (see
// sql/postgres/_partials/dead_rows.sql).
const deadRows = `dead_at IS NOT NULL AND status = 2`

// backlogMark is the low-water mark (see
// sql/postgres/_partials/backlog_mark.sql).
const backlogMark = `SELECT CASE WHEN h.seq_node = s.node THEN h.lwm ELSE 0 END FROM {{horizon}} AS h, (SELECT pg_relation_filenode(pg_get_serial_sequence('{{outbox}}', 'id')::regclass) AS node) AS s`
