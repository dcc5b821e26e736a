-- PostgreSQL has no index on status (the SENT update must stay HOT), so the
-- probe looks where the rescan claim looks: past the low-water mark along
-- the primary key, and at or below it along the requeued index, each an
-- ORDER BY id LIMIT 1 that walks the index from its start and stops at the
-- first due row. It also returns the mark and the highest id: while the mark
-- lags the highest id, the rows between are walked by every probe, and
-- AnyDue sweeps now and then to move the mark on. The mark is 0 after the
-- identity was restarted, as in sweep_check.
SELECT m.lwm, coalesce((SELECT max(id) FROM {{outbox}}), 0),
  (SELECT id FROM {{outbox}} WHERE id > m.lwm AND status = 0 AND next_retry_at <= now() ORDER BY id LIMIT 1) IS NOT NULL
  OR (SELECT id FROM {{outbox}} WHERE next_retry_at > created_at AND id <= m.lwm AND status = 0 AND next_retry_at <= now()
      ORDER BY id LIMIT 1) IS NOT NULL
FROM (SELECT CASE WHEN h.seq_node = s.node THEN h.lwm ELSE 0 END AS lwm
      FROM {{horizon}} AS h, ({{> seq_node}}) AS s) AS m
