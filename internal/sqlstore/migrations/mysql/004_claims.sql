-- Version 4: a relay's claim commits at once, and holds its batch by a lease
-- recorded here, not by a transaction left open while the broker has the
-- batch (which wait_timeout or idle_transaction_timeout could end in the
-- middle of every publish). A row is one claimed message: its id, the
-- claim's random token and the end of its lease. The message rows are
-- written once, when the relay marks them.
--
-- ENGINE=MEMORY: not transactional, so that a claim's rows are seen by
-- every other relay the moment they are written (no snapshot can miss them)
-- and the claim writes nothing to InnoDB's log, which its commit would
-- flush; a restart of the server forgets the leases, and the batches in
-- flight are published once more. Galera does not replicate MEMORY tables:
-- relays on different nodes of such a cluster do not see each other's
-- leases. Relays of an older version keep off a claim's rows only while it
-- is being taken: upgrade the relays of one table together.
CREATE TABLE IF NOT EXISTS {{claims}} (
  id    BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  token CHAR(24)        NOT NULL,
  until DATETIME(6)     NOT NULL,
  KEY {{claims_token_idx}} (token)
) ENGINE=MEMORY DEFAULT CHARSET=ascii COLLATE=ascii_bin;
