-- claim_ids is claim for the rows of the ids in $1 (a bigint array), with
-- the claim's other arguments ($2 the limit, $3 the token, $4 the lease in
-- milliseconds).
WITH async AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'off', true)
), due AS MATERIALIZED (
  SELECT c.*, g.gen FROM (
    SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at, next_retry_at, ctid FROM {{outbox}}
    WHERE id = ANY($1::bigint[]) AND status = 0 AND next_retry_at <= now()
    ORDER BY id
  ) AS c
  CROSS JOIN LATERAL ({{> chunk_lease c.id}}) AS g
  WHERE CASE WHEN g.live THEN false
        ELSE pg_try_advisory_xact_lock((SELECT '{{outbox}}'::regclass::oid::bigint << 31) | ((c.id >> 8) & 2147483647)) END
  LIMIT $2
), {{> claim_tail}}
