DELETE FROM {{outbox}}
WHERE {{> dead_rows}}
  AND (msg_id IN (SELECT jsonb_array_elements_text($1::jsonb)) OR $2)
  AND topic = COALESCE(NULLIF($3, ''), topic)
