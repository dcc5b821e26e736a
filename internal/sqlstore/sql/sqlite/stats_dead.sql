SELECT topic, count(*) FROM {{outbox}} WHERE status = 2 GROUP BY topic
