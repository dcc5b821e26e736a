-- The other outcomes move only rows the claim (its token, the second
-- argument) still holds: a relay that outlived its lease leaves another
-- relay's claim alone. OR FAIL: see mark_sent.
UPDATE OR FAIL {{outbox}} SET
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
  AND EXISTS (SELECT 1 FROM {{claims}} AS c WHERE c.token = ? AND {{outbox}}.id BETWEEN c.lo AND c.hi)
