-- id_sequence is the outbox's id sequence (NULL if the id has none).
pg_get_serial_sequence('{{outbox}}', 'id')::regclass
