BEGIN;
SET LOCAL synchronous_commit = off;
WITH due AS (SELECT id FROM outbox_bench WHERE status = 0 AND id > :cur AND next_retry_at <= now() ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED), u AS (UPDATE outbox_bench o SET status = 1, sent_at = now() FROM due WHERE o.id = due.id RETURNING o.id, o.msg_id, o.topic, o.payload) SELECT coalesce(max(id), 0) AS cur FROM u \gset
COMMIT;
