-- list_new is list for the NEW rows (args: topic, after id, limit), read as
-- backlog reads them (after backlog_setup): the requeued ones at or below
-- the low-water mark from their index, the others from the primary key past
-- the mark.
SELECT id, msg_id, topic, msg_key, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at FROM (
  (SELECT {{> list_columns}} FROM {{outbox}} AS o
   WHERE o.next_retry_at > o.created_at AND o.status = 0 AND o.id <= ({{> backlog_mark}}) AND o.id > $2
     AND o.topic = COALESCE(NULLIF($1, ''), o.topic)
   ORDER BY o.id LIMIT $3)
  UNION ALL
  (SELECT {{> list_columns}} FROM {{outbox}} AS o
   WHERE o.id > greatest(({{> backlog_mark}}), $2) AND o.status = 0
     AND o.topic = COALESCE(NULLIF($1, ''), o.topic)
   ORDER BY o.id LIMIT $3)
) AS p ORDER BY id LIMIT $3
