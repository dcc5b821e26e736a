-- hold does not read the blockers' rows itself: an UPDATE that joins them
-- takes a shared lock on each, and a blocker's failed mark, which holds the
-- MEMORY lease table's lock while it waits for its row, then closes a cycle
-- with a claim (its rows, then the lease table) that InnoDB cannot see. So
-- blocker_state reads them first without a lock, and hold takes their status
-- and next_retry_at as values: [id, status, next_retry_at] per held row.
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$[0]', s INT PATH '$[1]', t DATETIME(6) PATH '$[2]')) AS f
STRAIGHT_JOIN {{outbox}} AS o FORCE INDEX (PRIMARY) ON o.id = f.id
SET o.next_retry_at = CASE f.s
    WHEN 0 THEN IF(f.t > UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND, f.t)
    WHEN 2 THEN UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND
    ELSE UTC_TIMESTAMP(6) END
WHERE o.status = 0
