-- blockers: no index may name status (the SENT update must stay
-- HOT), so the key's index is (msg_key, id) WHERE msg_key IS NOT NULL, and
-- blockers bounds its walk with the low-water mark, or with the key's done
-- id (lo, outbox.HoldParams.Done) where that is higher: every NEW row at or
-- below either that is not requeued has gone, so a key's blockers are its
-- NEW rows between that bound and the batch (the index walk reads the key's
-- rows of that window, SENT ones included, and stops after n+1 NEW ones: at
-- most n are the batch's own) and its requeued rows below the batch, walked
-- the same way through the requeued rows' key index (version 10), a branch
-- skipped when that index holds no row at all.
-- The window is written as two row comparisons on (msg_key, id), which
-- together say msg_key = k and mark < id < hi, and which only the key's
-- index can use, as the bounds of its walk: a plain "id > mark AND id < hi"
-- would let the planner walk the primary key over the window (every key's
-- rows) once per key, and "msg_key = k" beside the row comparisons made
-- the index walk start at the key's first row, its whole history. "msg_key
-- IS NOT NULL" matches the index's predicate. The walk is ordered by
-- (msg_key, id), the key index's order, which the primary key cannot give:
-- "ORDER BY id LIMIT n" made the planner walk the primary key instead, the
-- whole table once per key.
-- DEAD rows come from the DEAD index, in a branch fenced (OFFSET 0) so that
-- it walks its own small index and is joined to the batch's keys by hash,
-- never walking a key's history through the key index.
-- The walk per key (x) is skipped when the relay vouches that the batch
-- and the claim in flight hold every NEW row below it that is not requeued
-- (outboxdriver.HoldParams.Whole): then only requeued and DEAD rows can
-- block.
-- Args: a JSON array of {k, hi, n, lo}; 2 when DEAD rows block (else 3);
-- whether to walk each key (false with Whole).
WITH m AS MATERIALIZED (
  SELECT coalesce(({{> backlog_mark}}), 0) AS lwm,
    EXISTS (SELECT 1 FROM {{outbox}} AS q WHERE q.next_retry_at > q.created_at AND q.msg_key IS NOT NULL) AS requeued
), b AS MATERIALIZED (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS b(k text, hi bigint, n int, lo bigint)
)
SELECT b.k, x.id FROM b CROSS JOIN LATERAL (
  SELECT o.id FROM {{outbox}} AS o
  WHERE o.msg_key IS NOT NULL AND o.status = 0
    AND (o.msg_key, o.id) > (b.k, greatest((SELECT lwm FROM m), coalesce(b.lo, 0))) AND (o.msg_key, o.id) < (b.k, b.hi)
  ORDER BY o.msg_key, o.id LIMIT b.n + 1) AS x
WHERE $3::bool
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
  OFFSET 0) AS d JOIN b ON b.k = d.msg_key
