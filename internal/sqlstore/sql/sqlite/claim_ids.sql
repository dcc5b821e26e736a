-- claim_ids is claim for the rows of the ids ({{ids}}).
SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at
FROM {{outbox}} AS o
WHERE id IN ({{ids}}) AND status = 0 AND next_retry_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
  AND NOT EXISTS (SELECT 1 FROM {{claims}} AS c WHERE o.id BETWEEN c.lo AND c.hi)
ORDER BY id
