-- Marks reach the rows by primary key only ({{ids}} expands to one
-- placeholder per id): a join would scan and lock rows of other
-- transactions, such as a late writer's uncommitted insert. The SENT mark
-- is one statement, its own transaction.
UPDATE {{outbox}} SET status = 1, sent_at = UTC_TIMESTAMP(6)
WHERE id IN ({{ids}}) AND status = 0
