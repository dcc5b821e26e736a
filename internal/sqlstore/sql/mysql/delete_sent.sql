-- delete_sent deletes the rows old_sent read (see old_sent).
DELETE o FROM JSON_TABLE(?, '$[*]' COLUMNS (i BIGINT PATH '$')) AS j
STRAIGHT_JOIN {{outbox}} AS o FORCE INDEX (PRIMARY) ON o.id = j.i
WHERE o.status = 1 AND o.sent_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
