-- claim reads the due rows outside every live claim's id range (see claim_expire).
SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at
FROM {{outbox}} AS o
WHERE status = 0 AND id > ?1 AND next_retry_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
  AND NOT EXISTS (SELECT 1 FROM {{claims}} AS c WHERE o.id BETWEEN c.lo AND c.hi)
ORDER BY id LIMIT ?2
