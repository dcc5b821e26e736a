SELECT id, msg_id, topic, msg_key, payload, headers, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at
FROM {{outbox}} WHERE msg_id = $1
