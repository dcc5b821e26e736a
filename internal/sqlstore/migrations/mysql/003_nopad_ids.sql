-- Version 3: msg_id and consumer_group compare as PostgreSQL and SQLite
-- compare them, byte for byte. utf8mb4_bin pads with spaces, so "m" and
-- "m " were one key: the writer refused the second as a duplicate, and the
-- inbox took the second message as consumed and skipped its effect. The NO
-- PAD binary collation is utf8mb4_nopad_bin on MariaDB and utf8mb4_0900_bin
-- on MySQL 8, so the ALTERs are built here for the server that runs them.
-- MODIFY states each column as version 1 made it; running it again changes
-- nothing, so a migration stopped after an ALTER (which commits on its own)
-- can run again. Under PAD SPACE no two keys differed in trailing spaces
-- alone, so no key becomes a duplicate. Each ALTER rebuilds its table.
SET @outbox_nopad_bin = IF(VERSION() LIKE '%MariaDB%', 'utf8mb4_nopad_bin', 'utf8mb4_0900_bin');
SET @outbox_alter = CONCAT('ALTER TABLE {{outbox}} MODIFY msg_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE ', @outbox_nopad_bin, ' NOT NULL');
PREPARE outbox_alter FROM @outbox_alter;
EXECUTE outbox_alter;
DEALLOCATE PREPARE outbox_alter;
SET @outbox_alter = CONCAT('ALTER TABLE {{inbox}}',
  ' MODIFY consumer_group VARCHAR(64) CHARACTER SET utf8mb4 COLLATE ', @outbox_nopad_bin, ' NOT NULL,',
  ' MODIFY msg_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE ', @outbox_nopad_bin, ' NOT NULL');
PREPARE outbox_alter FROM @outbox_alter;
EXECUTE outbox_alter;
DEALLOCATE PREPARE outbox_alter;
SET @outbox_alter = NULL, @outbox_nopad_bin = NULL;
