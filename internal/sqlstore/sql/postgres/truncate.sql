TRUNCATE {{outbox}}, {{inbox}}, {{claims}}
