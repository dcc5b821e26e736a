-- The probe walks the pending index (status = 0).
SELECT 0, 0, EXISTS (SELECT 1 FROM {{outbox}}
  WHERE status = 0 AND next_retry_at <= strftime('%Y-%m-%d %H:%M:%f', 'now'))
