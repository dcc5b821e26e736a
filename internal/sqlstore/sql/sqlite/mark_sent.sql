-- OR FAIL spares SQLite a statement journal for these multi-row updates: on
-- any error the whole transaction is rolled back anyway.
UPDATE OR FAIL {{outbox}}
SET status = 1, sent_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE status = 0 AND id IN (SELECT value FROM json_each(?))
