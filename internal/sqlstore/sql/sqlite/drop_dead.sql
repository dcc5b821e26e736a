DELETE FROM {{outbox}}
WHERE status = 2
  AND (msg_id IN (SELECT value FROM json_each(?1)) OR ?2)
  AND topic = COALESCE(NULLIF(?3, ''), topic)
