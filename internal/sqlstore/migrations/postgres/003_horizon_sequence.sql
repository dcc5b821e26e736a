-- Version 3: the low-water mark records which id sequence it was measured
-- against. TRUNCATE ... RESTART IDENTITY and ALTER TABLE ... ALTER COLUMN id
-- RESTART give the sequence a new relfilenode; a sweep that sees another one
-- starts the mark again from 0. Without it, ids that started again from 1
-- and passed the old mark before a relay swept would have left every new
-- row below the mark, where no claim looks.
ALTER TABLE {{horizon}} ADD COLUMN IF NOT EXISTS seq_node OID NOT NULL DEFAULT 0;
UPDATE {{horizon}}
SET seq_node = coalesce(pg_relation_filenode(pg_get_serial_sequence('{{outbox}}', 'id')::regclass), 0)
WHERE seq_node = 0;
