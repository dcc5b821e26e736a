-- Version 3: an index finds the DEAD rows, so that `outbox dead list`,
-- `dead retry --all`, `dead drop --all` and the Backlog's DEAD count read
-- them alone, not the whole table with its SENT history. SQLite has no HOT
-- update to keep: the index may name status. As with the pending index, a
-- statement uses it only when it says "status = 2" as a literal, which every
-- DEAD statement in sqlite.go does. The relay's SENT mark (0 to 1) touches
-- neither partial index's entries.
CREATE INDEX IF NOT EXISTS {{outbox_dead_idx}} ON {{outbox}} (id) WHERE status = 2;
