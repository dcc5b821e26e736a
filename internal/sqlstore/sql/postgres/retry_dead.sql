-- retry_dead marks each row it moves with the header outboxretried (see
-- outbox.RetriedHeader): the time of the retry.
UPDATE {{outbox}} SET status = 0, retries = 0, dead_at = NULL,
  next_retry_at = greatest(now(), created_at + interval '1 microsecond'),
  headers = coalesce(headers, '{}'::jsonb) || jsonb_build_object('outboxretried', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
  last_error = $1 || coalesce(last_error, '')
WHERE {{> dead_rows}}
  AND (msg_id IN (SELECT jsonb_array_elements_text($2::jsonb)) OR $3)
  AND topic = COALESCE(NULLIF($4, ''), topic)
