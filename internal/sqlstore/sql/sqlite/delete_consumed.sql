-- The inbox is WITHOUT ROWID: its rows are found by their primary key.
DELETE FROM {{inbox}} WHERE (consumer_group, msg_id) IN (
  SELECT consumer_group, msg_id FROM {{inbox}}
  WHERE consumed_at < strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', -?1 / 1000.0))
  LIMIT ?2)
