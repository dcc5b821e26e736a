SELECT topic, count(*) FROM {{outbox}} FORCE INDEX ({{outbox_pending_idx}}) WHERE status = 2 GROUP BY topic
