-- claim_after is claim from a cursor, through the primary key (see claim).
SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at
FROM {{outbox}} AS o FORCE INDEX (PRIMARY)
WHERE status = 0 AND id > ? AND next_retry_at <= UTC_TIMESTAMP(6)
  AND NOT EXISTS (SELECT 1 FROM {{claims}} AS c WHERE c.id = o.id AND c.until > UTC_TIMESTAMP(6))
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED
