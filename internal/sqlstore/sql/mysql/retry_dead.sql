-- retry_dead marks each row it moves with the header outboxretried (see
-- outbox.RetriedHeader): the time of the retry.
UPDATE {{outbox}} SET status = 0, retries = 0, next_retry_at = UTC_TIMESTAMP(6), dead_at = NULL,
  headers = JSON_SET(COALESCE(headers, JSON_OBJECT()), '$.outboxretried', DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%fZ')),
  last_error = CONCAT(?, coalesce(last_error, ''))
WHERE status = 2
  AND (msg_id IN (SELECT m FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$')) j) OR ?)
  AND topic = COALESCE(NULLIF(?, ''), topic)
