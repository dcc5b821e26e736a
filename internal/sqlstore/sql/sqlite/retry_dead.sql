-- retry_dead marks each row it moves with the header outboxretried (see
-- outbox.RetriedHeader): the time of the retry.
UPDATE {{outbox}} SET status = 0, retries = 0, dead_at = NULL,
  next_retry_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
  headers = json_set(coalesce(headers, '{}'), '$.outboxretried', strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  last_error = ?1 || coalesce(last_error, '')
WHERE status = 2
  AND (msg_id IN (SELECT value FROM json_each(?2)) OR ?3)
  AND topic = COALESCE(NULLIF(?4, ''), topic)
