-- claim_ids is claim for the rows of the ids ({{ids}}).
SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at
FROM {{outbox}} AS o
WHERE id IN ({{ids}}) AND status = 0 AND next_retry_at <= UTC_TIMESTAMP(6)
  AND NOT EXISTS (SELECT 1 FROM {{claims}} AS c WHERE c.id = o.id AND c.until > UTC_TIMESTAMP(6))
ORDER BY id
FOR UPDATE SKIP LOCKED
