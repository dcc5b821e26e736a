-- backlog walks the partial pending index, dead_count the partial DEAD
-- index (schema version 3). Every statement on the DEAD rows says
-- "status = 2" as a literal, for that index.
SELECT count(*), min(created_at), strftime('%Y-%m-%d %H:%M:%f', 'now') FROM {{outbox}} WHERE status = 0
