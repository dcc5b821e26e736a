-- Version 6: a relay's claim commits at once, and holds its batch by a lease
-- recorded here, not by a transaction left open while the broker has the
-- batch (which a server's idle_in_transaction_session_timeout or a pooler's
-- idle timeout could end in the middle of every publish). A row holds one
-- chunk of 256 consecutive ids (id >> 8): the token of the claim that holds
-- it (NULL once released), the end of its lease (once released, when it
-- was released), and its generation, which every claim and release of the
-- chunk moves on, so that a claim whose snapshot is older than the chunk's
-- last change leaves the chunk. A claim takes over an expired lease; the
-- mark releases its own; the relays' sweep deletes records unused for an
-- hour. UNLOGGED: the leases are not worth a WAL record, and a database
-- crash that forgets them only has the batches in flight published once
-- more. Relays of an older version keep off the chunks of a claim only
-- while it is being taken: upgrade the relays of one table together.
CREATE UNLOGGED TABLE IF NOT EXISTS {{claims}} (
  chunk BIGINT      PRIMARY KEY,
  token TEXT,
  until TIMESTAMPTZ NOT NULL,
  gen   BIGINT      NOT NULL
);
