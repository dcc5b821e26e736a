SELECT id, msg_id, topic, msg_key, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at
FROM {{outbox}}
WHERE status = ?1 AND topic = COALESCE(NULLIF(?2, ''), topic) AND id > ?3
ORDER BY id LIMIT ?4
