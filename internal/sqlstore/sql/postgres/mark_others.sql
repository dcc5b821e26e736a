-- k: 1 retry, 2 dead, 3 release (see outbox.OutcomeKind). A retry requeues
-- the row (next_retry_at past created_at). DEAD records the time in dead_at
-- (schema version 4) and sets next_retry_at back to created_at, so that the
-- row leaves the requeued index: there, every rescan would walk over it
-- until an operator retried or dropped it. The times are clock_timestamp(),
-- the time of the mark. Only rows still NEW in a chunk the claim's lease
-- ($2) still holds move: a relay that outlived its lease leaves another
-- relay's claim alone.
UPDATE {{outbox}} AS o SET
  status        = CASE f.k WHEN 2 THEN 2 ELSE 0 END,
  retries       = o.retries + CASE f.k WHEN 3 THEN 0 ELSE 1 END,
  next_retry_at = CASE f.k
    WHEN 1 THEN greatest(clock_timestamp() + f.d * interval '1 millisecond', o.created_at + interval '1 microsecond')
    WHEN 2 THEN o.created_at
    ELSE greatest(clock_timestamp(), o.created_at + interval '1 microsecond') END,
  last_error    = CASE f.k WHEN 3 THEN o.last_error ELSE f.e END,
  dead_at       = CASE f.k WHEN 2 THEN clock_timestamp() END
FROM jsonb_to_recordset($1::jsonb) AS f(id bigint, k int, d bigint, e text)
WHERE o.id = f.id AND o.status = 0
  AND EXISTS (SELECT 1 FROM {{claims}} AS l WHERE l.chunk = o.id >> 8 AND (l.token = $2 OR l.prev = $2))
