-- blocker_state reads the blockers for hold without a lock (see hold).
SELECT id, status, DATE_FORMAT(next_retry_at, '%Y-%m-%d %H:%i:%s.%f') FROM {{outbox}}
WHERE id IN (SELECT b FROM JSON_TABLE(?, '$[*]' COLUMNS (b BIGINT PATH '$[1]')) AS j)
