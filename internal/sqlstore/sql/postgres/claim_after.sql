-- claim_after walks the primary key from the relay's cursor one chunk at a
-- time (see claim): a recursive step finds the next chunk with a pending row
-- (one index probe), the chunk's lock is tried once, and only the rows of
-- chunks it got are read, from the pending row the step found (in the
-- statement's one snapshot nothing before it in the chunk is pending, so the
-- rows the step walked past are not walked again). A chunk another relay
-- holds (with two relays, the batch it claimed just past this relay's last
-- one) so costs one failed lock or one lookup in {{claims}}, not a heap
-- visit per row.
WITH RECURSIVE async AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'off', true)
), chunks(first) AS (
  SELECT (SELECT id FROM {{outbox}} WHERE id > $1 AND status = 0 ORDER BY id LIMIT 1)
  UNION ALL
  SELECT (SELECT id FROM {{outbox}} WHERE id >= ((c.first >> 8) + 1) << 8 AND status = 0 ORDER BY id LIMIT 1)
  FROM chunks AS c WHERE c.first IS NOT NULL
), due AS MATERIALIZED (
  SELECT o.*, g.gen
  FROM chunks AS k
  CROSS JOIN LATERAL (
    SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at, next_retry_at, ctid FROM {{outbox}}
    WHERE id >= k.first AND id < ((k.first >> 8) + 1) << 8 AND status = 0 AND next_retry_at <= now()
    ORDER BY id
  ) AS o
  CROSS JOIN LATERAL ({{> chunk_lease k.first}}) AS g
  WHERE k.first IS NOT NULL
    AND CASE WHEN g.live THEN false
        ELSE pg_try_advisory_xact_lock((SELECT '{{outbox}}'::regclass::oid::bigint << 31) | ((k.first >> 8) & 2147483647)) END
  LIMIT $2
), {{> claim_tail}}
