DELETE FROM {{outbox}} WHERE id IN (
  SELECT id FROM {{outbox}}
  WHERE status = 1 AND sent_at < now() - $1 * interval '1 millisecond'
  ORDER BY id LIMIT $2)
