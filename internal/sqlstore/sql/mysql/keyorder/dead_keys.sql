SELECT DISTINCT msg_key FROM {{outbox}}
WHERE status = 2 AND msg_key IS NOT NULL
  AND (msg_id IN (SELECT m FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$')) j) OR ?)
  AND topic = COALESCE(NULLIF(?, ''), topic)
