-- Version 5: messages of one key are published in id order across batches
-- and relays (outbox.KeyOrderer): before a batch is published, the relay
-- looks for earlier NEW rows of its keys, through this index, reading only
-- a key's NEW and DEAD rows, never its SENT history. InnoDB has no partial
-- index: every row has an entry, and the marks move it with status. MySQL 8
-- has no ADD INDEX IF NOT EXISTS: run again after the ALTER committed, the
-- duplicate index name is passed over.
ALTER TABLE {{outbox}} ADD INDEX {{outbox_key_idx}} (msg_key, status, id);
