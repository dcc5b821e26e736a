SELECT count(*) FROM {{outbox}} WHERE status = 2
