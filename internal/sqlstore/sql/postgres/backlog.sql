-- backlog reads the NEW rows the way the rescan finds them (a count by
-- status would read the whole table, SENT history included, since no index
-- mentions status): those at or below the low-water mark from the requeued
-- index, the others from the primary key past the mark. The mark is 0 after
-- the identity was restarted, as in sweep_check. Its cost grows with the
-- rows past the mark and the requeued ones, as the rescans' does.
SELECT count(*), min(p.created_at), now() FROM (
  SELECT o.created_at FROM {{outbox}} AS o
  WHERE o.next_retry_at > o.created_at AND o.status = 0 AND o.id <= ({{> backlog_mark}})
  UNION ALL
  SELECT o.created_at FROM {{outbox}} AS o
  WHERE o.id > ({{> backlog_mark}}) AND o.status = 0
) AS p
