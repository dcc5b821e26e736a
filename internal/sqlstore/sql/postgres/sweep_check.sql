-- The sweep advances the low-water mark in two statements, so that the
-- second one's snapshot is taken after the first has seen every listed
-- transaction end (one statement would read pg_locks after its own snapshot,
-- and could miss a row committed in between). sweep_check: has every
-- transaction listed at the last sweep ended? sweep_advance (args: the gen
-- sweep_check read; a concurrent sweep makes it update nothing): the mark
-- moves to just below the first fresh pending row up to cand, or to cand;
-- cand becomes the highest id visible now, with the transactions running
-- now. A transaction that holds an id up to cand began before cand was read
-- (ids come from one sequence, cache 1), so it was listed; once it has
-- ended, its row, if it committed, is visible to the next statement. Rows
-- already claimed but not yet committed count as pending (their old version
-- is what others see), so a relay that crashes leaves them above the mark.
-- A highest id below the mark means the identity was restarted: the mark
-- starts again from 0, and so it does when the id sequence has a new
-- relfilenode (seq_node), which catches a restart whose new ids have already
-- passed the mark. Until a sweep can advance, sweep_check gives 0 as the
-- mark after such a restart.
--
-- The transactions are every virtual transaction id in pg_locks (every
-- transaction holds its own from its start) of a client backend in this
-- database. pg_stat_activity hides other roles' backend_type, so an unknown
-- one counts: leaving one out could lose a row, counting one too many only
-- holds the mark back. A transaction left open holds it back until it ends;
-- rescans then walk more of the primary key. A prepared transaction
-- (two-phase commit) gives up its virtual id when it prepares, so while any
-- is prepared in this database the mark stays.
SELECT h.gen, CASE WHEN h.seq_node = s.node THEN h.lwm ELSE 0 END, NOT EXISTS (
  SELECT 1 FROM pg_locks AS l WHERE l.locktype = 'virtualxid' AND l.virtualxid = ANY(h.cand_vxids))
  AND NOT EXISTS (SELECT 1 FROM pg_prepared_xacts AS p WHERE p.database = current_database())
FROM {{horizon}} AS h, ({{> seq_node}}) AS s
