-- delete_consumed deletes the records old_consumed read (see old_sent).
DELETE i FROM JSON_TABLE(?, '$[*]' COLUMNS (g VARCHAR(64) PATH '$[0]', m VARCHAR(64) PATH '$[1]')) AS j
STRAIGHT_JOIN {{inbox}} AS i FORCE INDEX (PRIMARY) ON i.consumer_group = j.g AND i.msg_id = j.m
WHERE i.consumed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
