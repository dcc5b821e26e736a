-- Version 2: the relay's SENT update becomes a HOT update (PostgreSQL writes
-- the new row version on the same page and touches no index), which it can be
-- only when no index mentions a column the update changes. The pending index
-- (WHERE status = 0) goes; the relay finds fresh rows by walking the primary
-- key from its cursor, and rows put back after a claim through a small index
-- of requeued rows: a retry, a release or an operator's `dead retry` sets
-- next_retry_at past created_at, and the SENT update sets it back, so that
-- index holds only rows waiting for another attempt (and DEAD rows that were
-- retried before, which keep the time of their last attempt).
DROP INDEX IF EXISTS {{outbox_pending_idx_qualified}};
-- Rows SENT after a retry leave the requeued index.
UPDATE {{outbox}} SET next_retry_at = created_at WHERE status = 1 AND next_retry_at > created_at;
CREATE INDEX IF NOT EXISTS {{outbox_requeued_idx}} ON {{outbox}} (id) WHERE next_retry_at > created_at;
-- Room on each page for the SENT version of its rows, so that the update can
-- stay on the page. Pages written before this migration are full until
-- vacuum; new ones keep half free.
ALTER TABLE {{outbox}} SET (fillfactor = 50);
-- The relays' low-water mark: every row with id <= lwm is SENT, DEAD or in
-- the requeued index, and no transaction will commit one there. A sweep
-- advances it once every transaction that was running when cand (the highest
-- id then visible) was read has ended; cand_vxids lists those transactions.
CREATE TABLE IF NOT EXISTS {{horizon}} (
  one        BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
  lwm        BIGINT  NOT NULL DEFAULT 0,
  cand       BIGINT  NOT NULL DEFAULT 0,
  cand_vxids TEXT[]  NOT NULL DEFAULT '{}',
  gen        BIGINT  NOT NULL DEFAULT 0
);
INSERT INTO {{horizon}} (one) VALUES (true) ON CONFLICT DO NOTHING;
