-- dead_count walks the pending index for status 2 (see backlog).
SELECT count(*) FROM {{outbox}} WHERE status = 2
