TRUNCATE TABLE {{outbox}}
