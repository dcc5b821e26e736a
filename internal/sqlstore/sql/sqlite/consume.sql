INSERT INTO {{inbox}} (consumer_group, msg_id) VALUES (?, ?) ON CONFLICT DO NOTHING
