-- Version 10: the per-key order check (outbox.KeyOrderer) looks for a
-- batch's blockers at or below the low-water mark among the requeued rows,
-- those whose next_retry_at is past their created_at. This index holds
-- their (msg_key, id), so that the check reads only the batch's keys there,
-- not every requeued row. After a broker outage most of the backlog is
-- requeued, and reading all of it for every batch slowed the relay to a
-- few hundred messages a second. As the requeued index, it names no status,
-- so the SENT update stays HOT.
--
-- Migrate runs in one transaction, where CREATE INDEX CONCURRENTLY cannot:
-- the index is built with a plain CREATE INDEX, which holds off writers
-- while it is built (it is small: the requeued rows with a key).
CREATE INDEX IF NOT EXISTS {{outbox_requeued_key_idx}} ON {{outbox}} (msg_key, id)
  WHERE next_retry_at > created_at AND msg_key IS NOT NULL;
