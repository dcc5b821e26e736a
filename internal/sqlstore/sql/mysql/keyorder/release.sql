UPDATE {{outbox}} SET next_retry_at = UTC_TIMESTAMP(6)
WHERE status = 0 AND next_retry_at > UTC_TIMESTAMP(6)
  AND msg_key IN (SELECT k FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(128) PATH '$')) AS j)
