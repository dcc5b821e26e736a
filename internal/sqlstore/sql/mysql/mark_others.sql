-- k: 1 retry, 2 dead. Only rows still NEW that the claim (its token, the ?
-- after the JSON) still holds move: a relay that outlived its lease leaves
-- another relay's claim alone.
UPDATE {{outbox}} o
JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$.id', k INT PATH '$.k', d BIGINT PATH '$.d', e TEXT PATH '$.e')) f ON o.id = f.id
SET o.status        = CASE f.k WHEN 2 THEN 2 ELSE 0 END,
    o.retries       = o.retries + 1,
    o.next_retry_at = CASE f.k WHEN 1 THEN UTC_TIMESTAMP(6) + INTERVAL f.d * 1000 MICROSECOND ELSE o.next_retry_at END,
    o.last_error    = f.e,
    o.dead_at       = CASE f.k WHEN 2 THEN UTC_TIMESTAMP(6) END
WHERE EXISTS (SELECT 1 FROM {{claims}} AS c WHERE c.id = o.id AND c.token = ?)
  AND o.id IN ({{ids}}) AND o.status = 0
