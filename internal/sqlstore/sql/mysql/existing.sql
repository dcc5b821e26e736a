SELECT o.msg_id FROM {{outbox}} o
JOIN JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$')) j ON o.msg_id = j.m
