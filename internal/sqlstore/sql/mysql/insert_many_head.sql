INSERT INTO {{outbox}} (msg_id, topic, msg_key, payload, headers) VALUES
