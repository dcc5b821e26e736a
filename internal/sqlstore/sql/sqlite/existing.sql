SELECT msg_id FROM {{outbox}} WHERE msg_id IN (SELECT value FROM json_each(?))
