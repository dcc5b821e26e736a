-- Version 2: a DEAD row records when it became DEAD in dead_at (the same
-- column in every dialect). The rows already DEAD take the time their last
-- attempt came due, which is what next_retry_at held for them.
ALTER TABLE {{outbox}} ADD COLUMN dead_at DATETIME(6) NULL;
UPDATE {{outbox}} SET dead_at = next_retry_at WHERE status = 2 AND dead_at IS NULL;
