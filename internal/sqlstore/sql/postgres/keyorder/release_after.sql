-- release_after walks each key's rows above the marked one through the key's
-- index, bounded by row comparisons as the window of blockers is: those rows are
-- the held ones, not the key's history. Args: a JSON array of [key, id].
UPDATE {{outbox}} AS o SET next_retry_at = greatest(now(), o.created_at + interval '1 microsecond')
FROM (
  SELECT x.id FROM (SELECT e->>0 AS k, (e->>1)::bigint AS id FROM jsonb_array_elements($1::jsonb) AS e) AS f
  CROSS JOIN LATERAL (
    SELECT r.id FROM {{outbox}} AS r
    WHERE r.msg_key IS NOT NULL AND r.status = 0
      AND (r.msg_key, r.id) > (f.k, f.id) AND (r.msg_key, r.id) < (f.k, 9223372036854775807)
      AND r.next_retry_at > now()
    ORDER BY r.msg_key, r.id) AS x
) AS h
WHERE o.id = h.id AND o.status = 0 AND o.next_retry_at > now()
