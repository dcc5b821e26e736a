UPDATE JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(128) PATH '$[0]', id BIGINT PATH '$[1]')) AS f
STRAIGHT_JOIN {{outbox}} AS o FORCE INDEX ({{outbox_key_idx}}) ON o.msg_key = f.k AND o.status = 0 AND o.id > f.id
SET o.next_retry_at = UTC_TIMESTAMP(6)
WHERE o.next_retry_at > UTC_TIMESTAMP(6)
