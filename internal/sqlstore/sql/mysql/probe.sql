-- The probe walks the pending index (status = 0).
SELECT 0, 0, EXISTS (SELECT 1 FROM {{outbox}} FORCE INDEX ({{outbox_pending_idx}})
  WHERE status = 0 AND next_retry_at <= UTC_TIMESTAMP(6))
