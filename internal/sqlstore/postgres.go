package sqlstore

// postgresDialect is all the SQL the outbox runs on PostgreSQL 13+.
var postgresDialect = dialect{
	name:  "postgres",
	quote: quoteDouble,
	mode:  claimChunks,

	insertOne: `INSERT INTO {{outbox}} (msg_id, topic, msg_key, payload, headers)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (msg_id) DO NOTHING`,

	insertOneStrict: `INSERT INTO {{outbox}} (msg_id, topic, msg_key, payload, headers)
VALUES ($1, $2, $3, $4, $5)`,

	insertManyPG: `INSERT INTO {{outbox}} (msg_id, topic, msg_key, payload, headers)
SELECT m, t, NULLIF(k, ''), p::jsonb, NULLIF(h, '')::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS u(m, t, k, p, h, n)
ORDER BY n
ON CONFLICT (msg_id) DO NOTHING
RETURNING msg_id`,

	deleteInserted: `DELETE FROM {{outbox}} WHERE msg_id = ANY($1::text[])`,

	existing: `SELECT msg_id FROM {{outbox}} WHERE msg_id IN (SELECT jsonb_array_elements_text($1::jsonb))`,

	consume: `INSERT INTO {{inbox}} (consumer_group, msg_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,

	// A claim is one statement in a short transaction that commits before
	// the publish. Relays keep off each other's rows by chunks of 256
	// consecutive ids: a claim takes a chunk's transaction-scoped advisory
	// lock as the index scan meets its first due row (a relay skips chunks
	// another relay is claiming at that moment, and never waits), passes
	// over chunks that {{claims}} records under a live lease, and records
	// the chunks it took there under its token, with the end of its lease
	// (now() + $4 ms). The lock key is the table's oid (resolved once per
	// statement) and the chunk number, so outbox tables in different
	// schemas never share a chunk.
	//
	// A chunk under a live lease is passed over before its lock is tried
	// (the CASE), so that a claim never holds the lock of a chunk it
	// leaves, which would make another relay's claim leave it too.
	//
	// The statement reads the rows in its snapshot, taken before it got
	// the chunk's lock: another relay may have claimed the chunk and even
	// marked its rows since. So each chunk's record carries a generation,
	// which every claim and every release of the chunk moves on, and the
	// record is an INSERT ... ON CONFLICT DO UPDATE that takes the chunk
	// only if its generation is still the one the snapshot saw (none: 0)
	// and its lease is free or expired. ON CONFLICT reads the newest
	// committed record, whatever the snapshot; a chunk changed since is
	// left, and the statement returns only the rows of the chunks it
	// recorded, whose versions in its snapshot are then current. The rows
	// themselves are not written: they stay NEW until the mark, so they
	// count as pending for the low-water mark and for the Backlog, and a
	// relay that dies leaves them to be claimed again when its lease runs
	// out. {{claims}} is UNLOGGED: a database crash forgets the leases,
	// and the batches in flight are published once more.
	//
	// The relay's own transactions need not be durable (set_config below):
	// a claim or a mark lost in a database crash only means the messages
	// are published once more, which the consumers' inbox absorbs; the
	// business transaction that wrote the rows was committed durably. This
	// saves a WAL flush per transaction, and setting it inside the
	// statement saves a round trip.
	//
	// claimAfter walks the primary key from the relay's cursor one chunk at
	// a time: a recursive step finds the next chunk with a pending row (one
	// index probe), the chunk's lock is tried once, and only the rows of
	// chunks it got are read, from the pending row the step found (in the
	// statement's one snapshot nothing before it in the chunk is pending, so
	// the rows the step walked past are not walked again). A chunk another
	// relay holds (with two relays, the batch it claimed just past this
	// relay's last one) so costs one failed lock or one lookup in
	// {{claims}}, not a heap visit per row.
	//
	// The rescan's candidates come from a subquery with a LIMIT, in id order,
	// so that the planner walks an index for them (it knows only a few are
	// wanted) and applies the lock only to the rows the outer LIMIT takes: a
	// lock condition next to the scan would, in a sequential scan, lock every
	// chunk. Sixteen batches of candidates leave room for the rows other
	// relays hold. Only due rows are candidates: were the due test outside
	// the subqueries, rows waiting out a backoff could fill the sixteen
	// batches and hide a due row behind them for as long as they wait.
	//
	// The rescan, claim, is given the low-water mark of {{horizon}} (which the sweep
	// keeps below every row a relay must look at again, other than requeued
	// ones): it takes the requeued rows up to the mark from their index, then
	// walks the primary key past it. Every id of the first part is below
	// every id of the second, so the two are in id order one after the other
	// (a merge of the two scans is not a plan PostgreSQL 15 makes here).
	// The claims return each row's next_retry_at (when it came due).
	claimReturnsDue: true,

	// Without a status index the planner could judge a sequential scan and a
	// sort cheaper than walking an index when its statistics say few rows
	// are pending (they are: past the cursor). Each claim's transaction tells
	// it otherwise, so the plan does not depend on statistics or on whether
	// a prepared statement's plan is generic. JIT goes off with them: the
	// planner's penalty for a disabled plan would push any plan's cost past
	// the point where PostgreSQL compiles it.
	claimSetup: `SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off; SET LOCAL jit = off`,

	// The marks reach their rows by ctid (see markSent). With no statistics
	// (a new table) the planner would take a scan of the whole table for
	// cheaper than a TID scan, and with a generic plan, which counts ten
	// rows in a parameter array, a nested loop that compares every row
	// with every pair.
	markSetup: `SET LOCAL enable_seqscan = off; SET LOCAL enable_nestloop = off; SET LOCAL jit = off`,

	claimAfter: `WITH RECURSIVE async AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'off', true)
), chunks(first) AS (
  SELECT (SELECT id FROM {{outbox}} WHERE id > $1 AND status = 0 ORDER BY id LIMIT 1)
  UNION ALL
  SELECT (SELECT id FROM {{outbox}} WHERE id >= ((c.first >> 8) + 1) << 8 AND status = 0 ORDER BY id LIMIT 1)
  FROM chunks AS c WHERE c.first IS NOT NULL
), due AS MATERIALIZED (
  SELECT o.*, g.gen
  FROM chunks AS k
  CROSS JOIN LATERAL (
    SELECT id, msg_id, topic, msg_key, payload, headers, retries, created_at, next_retry_at, ctid FROM {{outbox}}
    WHERE id >= k.first AND id < ((k.first >> 8) + 1) << 8 AND status = 0 AND next_retry_at <= now()
    ORDER BY id
  ) AS o
  CROSS JOIN LATERAL (` + chunkLease("k.first") + `) AS g
  WHERE k.first IS NOT NULL
    AND CASE WHEN g.live THEN false
        ELSE pg_try_advisory_xact_lock((SELECT '{{outbox}}'::regclass::oid::bigint << 31) | ((k.first >> 8) & 2147483647)) END
  LIMIT $2
), want AS MATERIALIZED (
  SELECT DISTINCT d.id >> 8 AS chunk, d.gen FROM due AS d
), held AS (` + holdChunks + `)
` + claimedRows,

	claim: `WITH async AS MATERIALIZED (
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
  CROSS JOIN LATERAL (` + chunkLease("c.id") + `) AS g
  WHERE CASE WHEN g.live THEN false
        ELSE pg_try_advisory_xact_lock((SELECT '{{outbox}}'::regclass::oid::bigint << 31) | ((c.id >> 8) & 2147483647)) END
  LIMIT $2
), want AS MATERIALIZED (
  SELECT DISTINCT d.id >> 8 AS chunk, d.gen FROM due AS d
), held AS (` + holdChunks + `)
` + claimedRows,

	// markSent is the mark of a batch that all went out, one statement in
	// its own transaction, which also drops the claim's lease (args: the
	// rows' ids, the token, the rows' ctids as the claim read them). Only
	// rows still NEW move. It reaches the rows by the ctids the claim read,
	// one TID scan over all of them (ctid = ANY), with no walk of the
	// primary key per row, and checks each row's id against its ctid's
	// (a hash join with the pairs): a row someone else updated since the
	// claim (an operator) has moved to another ctid, which is not marked
	// (it stays NEW and is claimed again), and a ctid whose line a new row
	// version took since names another id. With the join's condition
	// alone, the planner makes a nested loop that rescans a TID scan once
	// per row, and each rescan reads the table's size from the kernel.
	// No index names status or sent_at, so the update is HOT: PostgreSQL
	// writes the new row version on the same page (fillfactor 50 leaves
	// room) and inserts no index entry.
	// markSentRequeued is markSent for a batch with requeued rows
	// (next_retry_at past created_at, as the claim read them): their
	// next_retry_at goes back to created_at, so that they leave the
	// requeued index (not HOT; rare). The value does not change on the
	// other rows, which keeps their update HOT.
	markSent: `WITH async AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'off', true)
), released AS (` + releaseChunks + `)
UPDATE {{outbox}} AS o SET status = 1, sent_at = now()
FROM async, unnest($3::text[]::tid[], $1::bigint[]) AS f(t, id)
WHERE o.ctid = ANY($3::text[]::tid[]) AND o.ctid = f.t AND o.id = f.id AND o.status = 0`,
	markSentRequeued: `WITH async AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'off', true)
), released AS (` + releaseChunks + `)
UPDATE {{outbox}} AS o SET status = 1, sent_at = now(), next_retry_at = least(o.next_retry_at, o.created_at)
FROM async, unnest($3::text[]::tid[], $1::bigint[]) AS f(t, id)
WHERE o.ctid = ANY($3::text[]::tid[]) AND o.ctid = f.t AND o.id = f.id AND o.status = 0`,
	claimRelease: releaseChunksStmt,

	// The sweep advances the low-water mark in two statements, so that the
	// second one's snapshot is taken after the first has seen every listed
	// transaction end (one statement would read pg_locks after its own
	// snapshot, and could miss a row committed in between). sweepCheck: has
	// every transaction listed at the last sweep ended? sweepAdvance (args:
	// the gen sweepCheck read; a concurrent sweep makes it update nothing):
	// the mark moves to just below the first fresh pending row up to cand, or
	// to cand; cand becomes the highest id visible now, with the transactions
	// running now. A transaction that holds an id up to cand began before
	// cand was read (ids come from one sequence, cache 1), so it was listed;
	// once it has ended, its row, if it committed, is visible to the next
	// statement. Rows already claimed but not yet committed count as pending
	// (their old version is what others see), so a relay that crashes leaves
	// them above the mark. A highest id below the mark means the identity was
	// restarted: the mark starts again from 0, and so it does when the id
	// sequence has a new relfilenode (seqNode), which catches a restart
	// whose new ids have already passed the mark. Until a sweep can advance,
	// sweepCheck gives 0 as the mark after such a restart.
	//
	// The transactions are every virtual transaction id in pg_locks (every
	// transaction holds its own from its start) of a client backend in this
	// database. pg_stat_activity hides other roles' backend_type, so an
	// unknown one counts: leaving one out could lose a row, counting one too
	// many only holds the mark back. A transaction left open holds it back
	// until it ends; rescans then walk more of the primary key. A prepared
	// transaction (two-phase commit) gives up its virtual id when it
	// prepares, so while any is prepared in this database the mark stays.
	sweepCheck: `SELECT h.gen, CASE WHEN h.seq_node = s.node THEN h.lwm ELSE 0 END, NOT EXISTS (
  SELECT 1 FROM pg_locks AS l WHERE l.locktype = 'virtualxid' AND l.virtualxid = ANY(h.cand_vxids))
  AND NOT EXISTS (SELECT 1 FROM pg_prepared_xacts AS p WHERE p.database = current_database())
FROM {{horizon}} AS h, (` + seqNode + `) AS s`,
	sweepAdvance: `WITH pruned AS (
  DELETE FROM {{claims}} WHERE until < now() - interval '1 hour'
)
UPDATE {{horizon}} AS h SET
  lwm = CASE WHEN n.top < h.lwm OR h.seq_node IS DISTINCT FROM n.node THEN 0 ELSE greatest(h.lwm, coalesce((
    SELECT min(o.id) - 1 FROM {{outbox}} AS o
    WHERE o.id > h.lwm AND o.id <= h.cand AND o.status = 0 AND o.next_retry_at <= o.created_at), h.cand)) END,
  cand = n.top, cand_vxids = n.vxids, gen = h.gen + 1, seq_node = coalesce(n.node, 0)
FROM (SELECT
  (` + seqNode + `) AS node,
  (SELECT coalesce(max(id), 0) FROM {{outbox}}) AS top,
  (SELECT coalesce(array_agg(l.virtualxid), '{}') FROM pg_locks AS l LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
   WHERE l.locktype = 'virtualxid' AND l.granted AND l.pid <> pg_backend_pid()
     AND coalesce(a.datname, current_database()) = current_database()
     AND coalesce(a.backend_type, 'client backend') = 'client backend') AS vxids) AS n
WHERE h.gen = $1
RETURNING h.lwm`,

	// k: 1 retry, 2 dead, 3 release (see outbox.OutcomeKind). A retry
	// requeues the row (next_retry_at past created_at). DEAD records the
	// time in dead_at (schema version 4) and sets next_retry_at back to
	// created_at, so that the row leaves the requeued index: there, every
	// rescan would walk over it until an operator retried or dropped it.
	// The times are clock_timestamp(), the time of the mark. Only rows still
	// NEW in a chunk the claim's lease ($2) still holds move: a relay that
	// outlived its lease leaves another relay's claim alone.
	markOthers: `UPDATE {{outbox}} AS o SET
  status        = CASE f.k WHEN 2 THEN 2 ELSE 0 END,
  retries       = o.retries + CASE f.k WHEN 3 THEN 0 ELSE 1 END,
  next_retry_at = CASE f.k
    WHEN 1 THEN greatest(clock_timestamp() + f.d * interval '1 millisecond', o.created_at + interval '1 microsecond')
    WHEN 2 THEN o.created_at
    ELSE greatest(clock_timestamp(), o.created_at + interval '1 microsecond') END,
  last_error    = CASE f.k WHEN 3 THEN o.last_error ELSE f.e END,
  dead_at       = CASE f.k WHEN 2 THEN clock_timestamp() END
FROM jsonb_to_recordset($1::jsonb) AS f(id bigint, k int, d bigint, e text)
WHERE o.id = f.id AND o.status = 0
  AND EXISTS (SELECT 1 FROM {{claims}} AS l WHERE l.chunk = o.id >> 8 AND (l.token = $2 OR l.prev = $2))`,

	seqCache: `SELECT coalesce((SELECT seqcache FROM pg_sequence WHERE seqrelid = ` + idSequence + `), 1)`,

	// rescanMark: the low-water mark, the highest id, and how long ago the
	// first row above the mark was written (how far back rescans walk).
	rescanMark: `SELECT h.lwm, coalesce((SELECT max(id) FROM {{outbox}}), 0),
  coalesce((SELECT extract(epoch FROM now() - o.created_at) FROM {{outbox}} AS o
            WHERE o.id > h.lwm ORDER BY o.id LIMIT 1), 0)::float8
FROM {{horizon}} AS h`,

	statsPending: `SELECT p.topic, count(*), min(p.created_at), now() FROM (
  SELECT o.topic, o.created_at FROM {{outbox}} AS o
  WHERE o.next_retry_at > o.created_at AND o.status = 0 AND o.id <= (` + backlogMark + `)
  UNION ALL
  SELECT o.topic, o.created_at FROM {{outbox}} AS o
  WHERE o.id > (` + backlogMark + `) AND o.status = 0
) AS p GROUP BY p.topic`,
	statsDead: `SELECT topic, count(*) FROM {{outbox}} WHERE ` + deadRows + ` GROUP BY topic`,
	statsSpan: statsSpan,

	// backlog reads the NEW rows the way the rescan finds them (a count by
	// status would read the whole table, SENT history included, since no
	// index mentions status): those at or below the low-water mark from the
	// requeued index, the others from the primary key past the mark. The
	// mark is 0 after the identity was restarted, as in sweepCheck. Its cost
	// grows with the rows past the mark and the requeued ones, as the
	// rescans' does. backlogSetup keeps the plan on the indexes (the planner
	// cannot know the mark) and in one process. deadCount walks the DEAD
	// index (see deadRows).
	backlogSetup: `SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL jit = off`,
	backlog: `SELECT count(*), min(p.created_at), now() FROM (
  SELECT o.created_at FROM {{outbox}} AS o
  WHERE o.next_retry_at > o.created_at AND o.status = 0 AND o.id <= (` + backlogMark + `)
  UNION ALL
  SELECT o.created_at FROM {{outbox}} AS o
  WHERE o.id > (` + backlogMark + `) AND o.status = 0
) AS p`,
	deadCount: `SELECT count(*) FROM {{outbox}} WHERE ` + deadRows,

	list: `SELECT id, msg_id, topic, msg_key, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at
FROM {{outbox}}
WHERE status = $1 AND topic = COALESCE(NULLIF($2, ''), topic) AND id > $3
ORDER BY id LIMIT $4`,
	// listNew is list for the NEW rows (args: topic, after id, limit), read
	// as backlog reads them (after backlogSetup): the requeued ones at or
	// below the low-water mark from their index, the others from the
	// primary key past the mark.
	listNew: `SELECT id, msg_id, topic, msg_key, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at FROM (
  (SELECT ` + listColumns + ` FROM {{outbox}} AS o
   WHERE o.next_retry_at > o.created_at AND o.status = 0 AND o.id <= (` + backlogMark + `) AND o.id > $2
     AND o.topic = COALESCE(NULLIF($1, ''), o.topic)
   ORDER BY o.id LIMIT $3)
  UNION ALL
  (SELECT ` + listColumns + ` FROM {{outbox}} AS o
   WHERE o.id > greatest((` + backlogMark + `), $2) AND o.status = 0
     AND o.topic = COALESCE(NULLIF($1, ''), o.topic)
   ORDER BY o.id LIMIT $3)
) AS p ORDER BY id LIMIT $3`,
	listDead: `SELECT id, msg_id, topic, msg_key, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at
FROM {{outbox}}
WHERE ` + deadRows + ` AND topic = COALESCE(NULLIF($1, ''), topic) AND id > $2
ORDER BY id LIMIT $3`,

	get: `SELECT id, msg_id, topic, msg_key, payload, headers, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at
FROM {{outbox}} WHERE msg_id = $1`,

	// retryDead marks each row it moves with the header outboxretried (see
	// outbox.RetriedHeader): the time of the retry.
	retryDead: `UPDATE {{outbox}} SET status = 0, retries = 0, dead_at = NULL,
  next_retry_at = greatest(now(), created_at + interval '1 microsecond'),
  headers = coalesce(headers, '{}'::jsonb) || jsonb_build_object('outboxretried', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
  last_error = $1 || coalesce(last_error, '')
WHERE ` + deadRows + `
  AND (msg_id IN (SELECT jsonb_array_elements_text($2::jsonb)) OR $3)
  AND topic = COALESCE(NULLIF($4, ''), topic)`,

	dropDead: `DELETE FROM {{outbox}}
WHERE ` + deadRows + `
  AND (msg_id IN (SELECT jsonb_array_elements_text($1::jsonb)) OR $2)
  AND topic = COALESCE(NULLIF($3, ''), topic)`,

	deleteSent: `DELETE FROM {{outbox}} WHERE id IN (
  SELECT id FROM {{outbox}}
  WHERE status = 1 AND sent_at < now() - $1 * interval '1 millisecond'
  ORDER BY id LIMIT $2)`,

	// The rows are found by a scan of the heap and deleted by their ctid,
	// which the scan read in the same statement.
	deleteConsumed: `DELETE FROM {{inbox}} WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM {{inbox}} WHERE consumed_at < now() - $1 * interval '1 millisecond' LIMIT $2))`,

	explain:  `EXPLAIN `,
	truncate: `TRUNCATE {{outbox}}, {{inbox}}, {{claims}}`,

	migrationsTable: `CREATE TABLE IF NOT EXISTS {{migrations}} (
  version    INT PRIMARY KEY,
  name       TEXT NOT NULL,
  applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
	schemaVersion:  `SELECT coalesce(max(version), 0) FROM {{migrations}}`,
	recordVersion:  `INSERT INTO {{migrations}} (version, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
	lockMigrations: `SELECT pg_advisory_xact_lock(hashtext($1))`,
}

// chunkLease reads the record in {{claims}} of the chunk of the row with
// id (an expression), with the record's generation (0 when there is none)
// and whether a live lease holds the row. A chunk held by the claim's
// predecessor ($5) does not hold the rows past the predecessor's last
// ($6): this claim may take the chunk over for them (see holdChunks).
func chunkLease(id string) string {
	return `SELECT coalesce(max(l.gen), 0) AS gen, coalesce(bool_or(l.token IS NOT NULL AND l.until > now()
    AND (l.token <> $5::text OR ` + id + ` <= $6::bigint)), false) AS live
FROM {{claims}} AS l WHERE l.chunk = ` + id + ` >> 8`
}

// holdChunks records the chunks of the rows in due (want, one row per
// chunk) under the claim's token ($3) until now() + $4 ms, each only if its
// record is still the generation due read and free, expired, or held by the
// claim's predecessor ($5, empty for none), and returns the chunks it
// recorded. A chunk taken from the predecessor keeps its token in prev: the
// predecessor's rows there stay under a live lease, and its mark still
// counts for them (markOthers). The claim reads only the rows past the
// predecessor's last ($6, see chunkLease), so the two claims' rows never
// meet.
const holdChunks = `
  INSERT INTO {{claims}} AS l (chunk, token, until, gen)
  SELECT w.chunk, $3::text, now() + $4 * interval '1 millisecond', w.gen + 1 FROM want AS w
  ON CONFLICT (chunk) DO UPDATE SET token = excluded.token, until = excluded.until, gen = excluded.gen,
    prev = CASE WHEN l.token = $5::text AND l.until > now() THEN l.token END
  WHERE l.gen = excluded.gen - 1 AND (l.token IS NULL OR l.until <= now() OR l.token = $5::text)
  RETURNING l.chunk
`

// claimedRows returns the rows of due in the chunks held recorded, then,
// if due read rows of a chunk held could not record (it changed after the
// statement's snapshot), one row with id 0, so that the claim can look
// again with a new snapshot.
const claimedRows = `SELECT d.id, d.msg_id, d.topic, d.msg_key, d.payload, d.headers, d.retries, d.created_at, d.next_retry_at, d.ctid::text
FROM due AS d, async
WHERE d.id >> 8 IN (SELECT chunk FROM held)
UNION ALL
SELECT 0, '', '', NULL, NULL, NULL, 0, now(), now(), ''
WHERE (SELECT count(*) FROM want) > (SELECT count(*) FROM held)`

// releaseChunks frees the chunks of a claim's token ($2): the next
// generation, no token, and in until the time it was freed, from which
// sweepAdvance drops records unused for an hour.
const releaseChunks = `
  UPDATE {{claims}} SET ` + releaseSet + ` WHERE token = $2 OR prev = $2
`

// releaseChunksStmt is releaseChunks alone, its token $1.
const releaseChunksStmt = `UPDATE {{claims}} SET ` + releaseSetStmt + ` WHERE token = $1 OR prev = $1`

// releaseSet is how a claim gives up its chunks. A chunk the claim took over
// from its predecessor (prev, see holdChunks) goes back to the predecessor,
// which still holds rows there; a chunk the claim's successor took over
// from it only forgets it; any other chunk of the claim is freed.
const releaseSet = `token = CASE WHEN token = $2 THEN prev ELSE token END,
    until = CASE WHEN token = $2 AND prev IS NULL THEN clock_timestamp() ELSE until END,
    prev = NULL, gen = gen + 1`

// releaseSetStmt is releaseSet with the token in $1.
const releaseSetStmt = `token = CASE WHEN token = $1 THEN prev ELSE token END,
    until = CASE WHEN token = $1 AND prev IS NULL THEN clock_timestamp() ELSE until END,
    prev = NULL, gen = gen + 1`

// deadRows is how every statement on the DEAD rows names them, so that the
// planner can use the DEAD index ({{outbox_dead_idx}}, WHERE dead_at IS NOT
// NULL; schema version 5). No index may name status, whose change is the
// SENT update (HOT only while no index names a column it changes), so the
// index names dead_at, and "status = 2" alone would not match its
// predicate. Every DEAD row has a dead_at: markOthers sets it with status 2,
// dead retry clears it with status 0, migrations 004 and 005 gave one to the
// rows already DEAD, and the trigger {{outbox_dead_at}} (005) gives one to a
// row that someone else's UPDATE sets to 2 without it. A row inserted with
// status 2 and no dead_at (no statement of the outbox does that) is not
// found here, only by Stats. "status = 2" stays: a row set back from DEAD by
// hand may keep its dead_at.
const deadRows = `dead_at IS NOT NULL AND status = 2`

// listColumns are the columns of list, of the rows named o.
const listColumns = `o.id, o.msg_id, o.topic, o.msg_key, o.status, o.retries, o.next_retry_at, o.created_at, o.sent_at, o.last_error, o.dead_at`

// statsSpan is newest id minus oldest id plus one, each end read from the
// primary key alone.
const statsSpan = `SELECT coalesce((SELECT max(id) FROM {{outbox}}) - (SELECT min(id) FROM {{outbox}}) + 1, 0)`

// backlogMark is the low-water mark, or 0 when the id sequence has a new
// relfilenode (see sweepCheck).
const backlogMark = `SELECT CASE WHEN h.seq_node = s.node THEN h.lwm ELSE 0 END FROM {{horizon}} AS h, (` + seqNode + `) AS s`

// seqNode is the relfilenode of the outbox's id sequence (NULL if the id has
// none). Restarting the identity (TRUNCATE ... RESTART IDENTITY, ALTER TABLE
// ... ALTER COLUMN id RESTART) gives the sequence a new one; the sweep then
// starts the low-water mark again from 0. setval does not change it: a
// sequence set back by hand is caught only while the highest id is still
// below the mark.
const seqNode = `SELECT pg_relation_filenode(` + idSequence + `) AS node`

// idSequence is the outbox's id sequence (NULL if the id has none).
const idSequence = `pg_get_serial_sequence('{{outbox}}', 'id')::regclass`
