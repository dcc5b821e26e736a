-- The cleanups read the keys of the rows to delete first, with a plain
-- SELECT, which locks nothing (old_sent, old_consumed), and then delete
-- those rows by primary key, checking again under the row lock. A DELETE
-- that finds its rows itself locks every row it reads, even at READ
-- COMMITTED (only an UPDATE reads a locked row's last committed version
-- instead), and on a table of SENT rows the optimizer walks the primary
-- key, so the last statement of a cleanup waited for every writer's
-- uncommitted row and for every relay's claim. The delete joins the keys
-- first (STRAIGHT_JOIN) and reaches the rows by the primary key (FORCE
-- INDEX), as the optimizer does not on a small table.
SELECT id FROM {{outbox}}
WHERE status = 1 AND sent_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY id LIMIT ?
