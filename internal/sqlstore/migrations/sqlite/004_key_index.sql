-- Version 4: messages of one key are published in id order across batches
-- and relays (outbox.KeyOrderer): before a batch is published, the relay
-- looks for earlier NEW rows of its keys, through this index, reading only a
-- key's NEW and DEAD rows, never its SENT history. Rows without a key have no
-- entry.
CREATE INDEX IF NOT EXISTS {{outbox_key_idx}} ON {{outbox}} (msg_key, status, id) WHERE msg_key IS NOT NULL;
