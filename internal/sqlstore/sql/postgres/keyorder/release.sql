UPDATE {{outbox}} SET next_retry_at = greatest(now(), created_at + interval '1 microsecond')
WHERE next_retry_at > created_at AND next_retry_at > now() AND status = 0
  AND msg_key IN (SELECT jsonb_array_elements_text($1::jsonb))
