DELETE FROM {{outbox}}
