INSERT INTO {{inbox}} (consumer_group, msg_id) VALUES ($1, $2) ON CONFLICT DO NOTHING
