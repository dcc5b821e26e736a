SELECT msg_id FROM {{outbox}} WHERE msg_id IN (SELECT jsonb_array_elements_text($1::jsonb))
