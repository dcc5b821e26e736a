-- Version 6: a claim records its leases by runs of consecutive ids, one row
-- per run (a batch of 500 new rows is one run), instead of one row per
-- message: the claim writes a row or two to the MEMORY table, and the mark
-- drops them, in place of 500 each. A run covers only ids the claim took
-- (the run ends at any id it did not take), and seq orders the leases, so
-- the failed mark of a relay whose lease ran out can tell whether a later
-- claim took its row. The leases in flight when this runs are dropped, and
-- those batches are published once more; stop the relays of the table, or
-- upgrade them together, for the migration.
DROP TABLE IF EXISTS {{claims}};
CREATE TABLE {{claims}} (
  seq   BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  token CHAR(24)        NOT NULL,
  lo    BIGINT UNSIGNED NOT NULL,
  hi    BIGINT UNSIGNED NOT NULL,
  until DATETIME(6)     NOT NULL,
  KEY {{claims_token_idx}} (token) USING BTREE
) ENGINE=MEMORY DEFAULT CHARSET=ascii COLLATE=ascii_bin;
