-- A claim is a short READ COMMITTED transaction (rowsClaimer.claim): record
-- locks on the claimed rows only, no gap locks where writers insert, and
-- none left once it commits, before the publish. It locks the due rows that
-- no live lease in {{claims}} holds (SKIP LOCKED: rows another relay is
-- claiming are passed over) and records one lease per row (claim_record).
-- {{claims}} is a MEMORY table, not transactional: a claim's leases are
-- there for every relay before the claim commits and unlocks its rows, and
-- InnoDB applies the lease test to a row only once it holds its lock, so a
-- row is never claimed twice. From the start (a rescan) the claim goes
-- through the pending index; from a cursor, which Relay.Run keeps at the
-- frontier, through the primary key (claim_after), which at READ COMMITTED
-- InnoDB walks at twice the speed of the secondary index.
SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at
FROM {{outbox}} AS o
WHERE status = 0 AND id > ? AND next_retry_at <= UTC_TIMESTAMP(6)
  AND NOT EXISTS (SELECT 1 FROM {{claims}} AS c WHERE c.id = o.id AND c.until > UTC_TIMESTAMP(6))
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED
