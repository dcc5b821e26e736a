SELECT id, msg_id, topic, msg_key, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at
FROM {{outbox}}
WHERE status = 2 AND topic = COALESCE(NULLIF(?1, ''), topic) AND id > ?2
ORDER BY id LIMIT ?3
