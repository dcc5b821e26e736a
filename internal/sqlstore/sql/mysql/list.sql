SELECT id, msg_id, topic, msg_key, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at
FROM {{outbox}}
WHERE status = ? AND topic = COALESCE(NULLIF(?, ''), topic) AND id > ?
ORDER BY id LIMIT ?
