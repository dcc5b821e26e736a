-- A claim is one statement in a short transaction that commits before the
-- publish. Relays keep off each other's rows by chunks of 256 consecutive
-- ids: a claim takes a chunk's transaction-scoped advisory lock as the index
-- scan meets its first due row (a relay skips chunks another relay is
-- claiming at that moment, and never waits), passes over chunks that
-- {{claims}} records under a live lease, and records the chunks it took
-- there under its token, with the end of its lease (now() + $4 ms). The lock
-- key is the table's oid (resolved once per statement) and the chunk number,
-- so outbox tables in different schemas never share a chunk.
--
-- A chunk under a live lease is passed over before its lock is tried (the
-- CASE), so that a claim never holds the lock of a chunk it leaves, which
-- would make another relay's claim leave it too.
--
-- The statement reads the rows in its snapshot, taken before it got the
-- chunk's lock: another relay may have claimed the chunk and even marked its
-- rows since. So each chunk's record carries a generation, which every claim
-- and every release of the chunk moves on, and the record is an INSERT ...
-- ON CONFLICT DO UPDATE that takes the chunk only if its generation is still
-- the one the snapshot saw (none: 0) and its lease is free or expired. ON
-- CONFLICT reads the newest committed record, whatever the snapshot; a chunk
-- changed since is left, and the statement returns only the rows of the
-- chunks it recorded, whose versions in its snapshot are then current. The
-- rows themselves are not written: they stay NEW until the mark, so they
-- count as pending for the low-water mark and for the Backlog, and a relay
-- that dies leaves them to be claimed again when its lease runs out.
-- {{claims}} is UNLOGGED: a database crash forgets the leases, and the
-- batches in flight are published once more.
--
-- The relay's own transactions need not be durable (set_config below): a
-- claim or a mark lost in a database crash only means the messages are
-- published once more, which the consumers' inbox absorbs; the business
-- transaction that wrote the rows was committed durably. This saves a WAL
-- flush per transaction, and setting it inside the statement saves a round
-- trip.
--
-- The rescan's candidates come from a subquery with a LIMIT, in id order, so
-- that the planner walks an index for them (it knows only a few are wanted)
-- and applies the lock only to the rows the outer LIMIT takes: a lock
-- condition next to the scan would, in a sequential scan, lock every chunk.
-- Sixteen batches of candidates leave room for the rows other relays hold.
-- Only due rows are candidates: were the due test outside the subqueries,
-- rows waiting out a backoff could fill the sixteen batches and hide a due
-- row behind them for as long as they wait.
--
-- The rescan, claim, is given the low-water mark of {{horizon}} (which the
-- sweep keeps below every row a relay must look at again, other than
-- requeued ones): it takes the requeued rows up to the mark from their
-- index, then walks the primary key past it. Every id of the first part is
-- below every id of the second, so the two are in id order one after the
-- other (a merge of the two scans is not a plan PostgreSQL 15 makes here).
-- The claims return each row's next_retry_at (when it came due).
WITH async AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'off', true)
), due AS MATERIALIZED (
  SELECT c.*, g.gen FROM (
    (SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at, next_retry_at, ctid FROM {{outbox}}
     WHERE next_retry_at > created_at AND id <= $1 AND status = 0 AND next_retry_at <= now()
     ORDER BY id LIMIT $2 * 16)
    UNION ALL
    (SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at, next_retry_at, ctid FROM {{outbox}}
     WHERE id > $1 AND status = 0 AND next_retry_at <= now()
     ORDER BY id LIMIT $2 * 16)
  ) AS c
  CROSS JOIN LATERAL ({{> chunk_lease c.id}}) AS g
  WHERE CASE WHEN g.live THEN false
        ELSE pg_try_advisory_xact_lock((SELECT '{{outbox}}'::regclass::oid::bigint << 31) | ((c.id >> 8) & 2147483647)) END
  LIMIT $2
), {{> claim_tail}}
