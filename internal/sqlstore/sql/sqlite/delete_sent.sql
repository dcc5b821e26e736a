DELETE FROM {{outbox}} WHERE id IN (
  SELECT id FROM {{outbox}}
  WHERE status = 1 AND sent_at < strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', -?1 / 1000.0))
  ORDER BY id LIMIT ?2)
