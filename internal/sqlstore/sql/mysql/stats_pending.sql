SELECT topic, count(*), min(created_at), UTC_TIMESTAMP(6)
FROM {{outbox}} FORCE INDEX ({{outbox_pending_idx}}) WHERE status = 0 GROUP BY topic
