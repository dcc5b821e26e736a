-- backlog and dead_count walk the pending index (status, id) for their
-- status only, never the SENT history. On a small table the optimizer would
-- rather scan it all than look up each pending row's created_at: FORCE
-- INDEX keeps the cost with the backlog when the table grows.
SELECT count(*), min(created_at), UTC_TIMESTAMP(6)
FROM {{outbox}} FORCE INDEX ({{outbox_pending_idx}}) WHERE status = 0
