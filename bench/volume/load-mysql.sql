-- Fills an outbox table (migrated by `outbox migrate`) with @n rows spread
-- evenly over @days days of created_at, oldest first: the last @pending rows
-- are NEW, one row in @dead_every is DEAD, every other row is SENT a second
-- after it was created. Rows come from the sequence engine (seq_1_to_N).
-- Run with
--   (echo "SET @n=10000000, @days=7, @pending=10000, @dead_every=1000;"; cat load-mysql.sql) | mariadb
SET @stmt = CONCAT("
INSERT INTO outbox (msg_id, topic, msg_key, payload, headers, status, retries,
                    next_retry_at, created_at, sent_at, last_error, dead_at)
SELECT CONCAT('vol-', seq),
       CONCAT('topic-', seq % 8),
       CONCAT('key-', seq % 1000),
       JSON_OBJECT('order', seq, 'amount', seq % 10000, 'currency', 'EUR',
                   'note', REPEAT('x', 120)),
       NULL, s, IF(s = 2, 10, 0), c, c,
       IF(s = 1, c + INTERVAL 1 SECOND, NULL),
       IF(s = 2, 'broker refused: 503 Service Unavailable', NULL),
       IF(s = 2, c + INTERVAL 1 MINUTE, NULL)
FROM (SELECT seq,
             UTC_TIMESTAMP(6) - INTERVAL FLOOR(@days * 86400000000 * (1 - seq / @n)) MICROSECOND AS c,
             CASE WHEN seq > @n - @pending THEN 0 WHEN seq % @dead_every = 0 THEN 2 ELSE 1 END AS s
      FROM seq_1_to_", @n, ") AS g
ORDER BY seq");
PREPARE load_rows FROM @stmt;
EXECUTE load_rows;
DEALLOCATE PREPARE load_rows;
ANALYZE TABLE outbox;
