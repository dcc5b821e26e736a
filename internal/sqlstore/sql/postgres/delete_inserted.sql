DELETE FROM {{outbox}} WHERE msg_id = ANY($1::text[])
