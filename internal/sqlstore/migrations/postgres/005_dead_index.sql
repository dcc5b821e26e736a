-- Version 5: an index finds the DEAD rows, so that `outbox dead list`,
-- `dead retry --all`, `dead drop --all` and the Backlog's DEAD count read
-- them alone, not the whole table with its SENT history. It must not name
-- status or sent_at, which the relay's SENT update changes (the update would
-- stop being HOT), so it names dead_at, which is set exactly when a row goes
-- DEAD (markOthers) and cleared by `dead retry`.
--
-- A row set DEAD by hand (UPDATE ... SET status = 2) gets no dead_at from the
-- outbox's own statements, and no index without status could find it. The
-- trigger below gives it one after the update, with a statement of its own
-- (not HOT; rare). An AFTER trigger, not a BEFORE one: a BEFORE ROW UPDATE
-- trigger makes PostgreSQL lock every updated row first (a WAL record per
-- row, what the chunk locks spare the claim), whatever its WHEN; an AFTER
-- trigger only evaluates its WHEN on each row. It fires only for UPDATEs that
-- set status, so its own UPDATE does not fire it. Its WHEN names status
-- alone (the function tests dead_at), so that a column of the WHEN does not
-- hold dead_at in place (DROP COLUMN would refuse); it runs for each row the
-- relay marks DEAD too, which is rare, and returns at once. It reads dead_at
-- through to_jsonb(NEW), which is NULL when there is no such column (tables
-- taken back to an older schema by hand, as tests do), where NEW.dead_at
-- would fail the update. The function
-- reaches the table through TG_TABLE_SCHEMA and TG_TABLE_NAME, not the
-- search_path of whoever updated the row. A row inserted with status 2 must carry dead_at.
-- Rows made DEAD by hand since version 4 take the time their last attempt
-- came due, as version 4 did.
--
-- The function's body keeps its semicolons inside its lines: the migration
-- is split into statements at lines that end with one.
--
-- Migrate runs in one transaction, where CREATE INDEX CONCURRENTLY cannot
-- run: the index is built with a plain CREATE INDEX, which holds off writers
-- of the table while it is built (this whole migration took 0.38 s on a
-- table of a million rows here).
UPDATE {{outbox}} SET dead_at = next_retry_at, next_retry_at = created_at
WHERE status = 2 AND dead_at IS NULL;
CREATE INDEX IF NOT EXISTS {{outbox_dead_idx}} ON {{outbox}} (id) WHERE dead_at IS NOT NULL;
CREATE OR REPLACE FUNCTION {{outbox_dead_at_fn}}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
  IF to_jsonb(NEW) -> 'dead_at' = 'null' THEN EXECUTE format('UPDATE %I.%I SET dead_at = clock_timestamp(), next_retry_at = created_at WHERE id = $1 AND status = 2 AND dead_at IS NULL', TG_TABLE_SCHEMA, TG_TABLE_NAME) USING NEW.id; END IF; RETURN NULL; END $$;
DROP TRIGGER IF EXISTS {{outbox_dead_at}} ON {{outbox}};
CREATE TRIGGER {{outbox_dead_at}} AFTER UPDATE OF status ON {{outbox}}
FOR EACH ROW WHEN (NEW.status = 2) EXECUTE FUNCTION {{outbox_dead_at_fn}}();
