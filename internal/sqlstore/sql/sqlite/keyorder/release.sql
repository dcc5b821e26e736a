UPDATE OR FAIL {{outbox}} SET next_retry_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE status = 0 AND next_retry_at > strftime('%Y-%m-%d %H:%M:%f', 'now')
  AND msg_key IN (SELECT value FROM json_each(?1))
