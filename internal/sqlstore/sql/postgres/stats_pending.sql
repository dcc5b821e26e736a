SELECT p.topic, count(*), min(p.created_at), now() FROM (
  SELECT o.topic, o.created_at FROM {{outbox}} AS o
  WHERE o.next_retry_at > o.created_at AND o.status = 0 AND o.id <= ({{> backlog_mark}})
  UNION ALL
  SELECT o.topic, o.created_at FROM {{outbox}} AS o
  WHERE o.id > ({{> backlog_mark}}) AND o.status = 0
) AS p GROUP BY p.topic
