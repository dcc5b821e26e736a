-- Version 4: a DEAD row records when it became DEAD in dead_at, and leaves
-- the requeued index. Before, a DEAD row kept the time its last attempt came
-- due in next_retry_at (past created_at), and so its entry in
-- {{outbox_requeued_idx}}: every rescan walked over every DEAD row to the
-- heap (100,000 DEAD rows cost a rescan 24 ms). The rows already DEAD move:
-- dead_at takes that time, next_retry_at goes back to created_at.
ALTER TABLE {{outbox}} ADD COLUMN IF NOT EXISTS dead_at TIMESTAMPTZ;
UPDATE {{outbox}} SET dead_at = next_retry_at, next_retry_at = created_at
WHERE status = 2 AND dead_at IS NULL;
