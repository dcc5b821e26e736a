INSERT INTO {{outbox}} (msg_id, topic, msg_key, payload, headers)
VALUES ($1, $2, $3, $4, $5)
