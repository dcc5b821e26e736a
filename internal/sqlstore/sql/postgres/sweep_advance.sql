-- sweep_advance moves the low-water mark on (see sweep_check), and drops
-- the records of {{claims}} unused for an hour.
WITH pruned AS (
  DELETE FROM {{claims}} WHERE until < now() - interval '1 hour'
)
UPDATE {{horizon}} AS h SET
  lwm = CASE WHEN n.top < h.lwm OR h.seq_node IS DISTINCT FROM n.node THEN 0 ELSE greatest(h.lwm, coalesce((
    SELECT min(o.id) - 1 FROM {{outbox}} AS o
    WHERE o.id > h.lwm AND o.id <= h.cand AND o.status = 0 AND o.next_retry_at <= o.created_at), h.cand)) END,
  cand = n.top, cand_vxids = n.vxids, gen = h.gen + 1, seq_node = coalesce(n.node, 0)
FROM (SELECT
  ({{> seq_node}}) AS node,
  (SELECT coalesce(max(id), 0) FROM {{outbox}}) AS top,
  (SELECT coalesce(array_agg(l.virtualxid), '{}') FROM pg_locks AS l LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
   WHERE l.locktype = 'virtualxid' AND l.granted AND l.pid <> pg_backend_pid()
     AND coalesce(a.datname, current_database()) = current_database()
     AND coalesce(a.backend_type, 'client backend') = 'client backend') AS vxids) AS n
WHERE h.gen = $1
RETURNING h.lwm
