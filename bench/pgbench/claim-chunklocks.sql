BEGIN;
SET LOCAL synchronous_commit = off;
WITH due AS (SELECT id FROM outbox_bench WHERE status = 0 AND id > :cur AND CASE WHEN next_retry_at <= now() THEN pg_try_advisory_xact_lock(4242, ((id >> 8) % 2147483647)::int) ELSE false END ORDER BY id LIMIT 500), u AS (UPDATE outbox_bench o SET status = 1, sent_at = now() FROM due WHERE o.id = due.id AND o.status = 0 RETURNING o.id, o.msg_id, o.topic, o.payload) SELECT coalesce(max(id), 0) AS cur FROM u \gset
COMMIT;
