SELECT topic, count(*), min(created_at), strftime('%Y-%m-%d %H:%M:%f', 'now')
FROM {{outbox}} WHERE status = 0 GROUP BY topic
