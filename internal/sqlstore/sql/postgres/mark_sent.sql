-- mark_sent is the mark of a batch that all went out, one statement in its
-- own transaction, which also drops the claim's lease (args: the rows' ids,
-- the token, the rows' ctids as the claim read them). Only rows still NEW
-- move. It reaches the rows by the ctids the claim read, one TID scan over
-- all of them (ctid = ANY), with no walk of the primary key per row, and
-- checks each row's id against its ctid's (a hash join with the pairs): a
-- row someone else updated since the claim (an operator) has moved to
-- another ctid, which is not marked (it stays NEW and is claimed again), and
-- a ctid whose line a new row version took since names another id. With the
-- join's condition alone, the planner makes a nested loop that rescans a TID
-- scan once per row, and each rescan reads the table's size from the kernel.
-- No index names status or sent_at, so the update is HOT: PostgreSQL writes
-- the new row version on the same page (fillfactor 50 leaves room) and
-- inserts no index entry.
WITH async AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'off', true)
), released AS (
  {{> release_chunks}}
)
UPDATE {{outbox}} AS o SET status = 1, sent_at = now()
FROM async, unnest($3::text[]::tid[], $1::bigint[]) AS f(t, id)
WHERE o.ctid = ANY($3::text[]::tid[]) AND o.ctid = f.t AND o.id = f.id AND o.status = 0
