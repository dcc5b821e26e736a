-- old_consumed reads the keys delete_consumed deletes (see old_sent).
SELECT consumer_group, msg_id FROM {{inbox}}
WHERE consumed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
LIMIT ?
