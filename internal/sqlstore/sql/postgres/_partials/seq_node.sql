-- seq_node is the relfilenode of the outbox's id sequence (NULL if the id
-- has none). Restarting the identity (TRUNCATE ... RESTART IDENTITY, ALTER
-- TABLE ... ALTER COLUMN id RESTART) gives the sequence a new one; the sweep
-- then starts the low-water mark again from 0. setval does not change it: a
-- sequence set back by hand is caught only while the highest id is still
-- below the mark.
SELECT pg_relation_filenode({{> id_sequence}}) AS node
