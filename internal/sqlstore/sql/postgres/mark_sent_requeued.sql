-- mark_sent_requeued is mark_sent for a batch with requeued rows
-- (next_retry_at past created_at, as the claim read them): their
-- next_retry_at goes back to created_at, so that they leave the requeued
-- index (not HOT; rare). The value does not change on the other rows, which
-- keeps their update HOT.
WITH async AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'off', true)
), released AS (
  {{> release_chunks}}
)
UPDATE {{outbox}} AS o SET status = 1, sent_at = now(), next_retry_at = least(o.next_retry_at, o.created_at)
FROM async, unnest($3::text[]::tid[], $1::bigint[]) AS f(t, id)
WHERE o.ctid = ANY($3::text[]::tid[]) AND o.ctid = f.t AND o.id = f.id AND o.status = 0
