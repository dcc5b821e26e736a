-- Version 7: a row an operator sets back to NEW by hand (UPDATE ... SET
-- status = 0 on a SENT or a DEAD row) is relayed again. A rescan finds the
-- rows at or below the low-water mark through the requeued index only
-- (next_retry_at past created_at), and such a row usually has next_retry_at
-- = created_at: it was never relayed again. The trigger below moves its
-- next_retry_at past created_at (to now), with a statement of its own after
-- the update, so that the row enters the requeued index. `outbox dead retry`
-- sets next_retry_at itself, and the trigger's WHEN leaves its rows alone.
-- An AFTER trigger, for the reason version 5 gives: the relay's SENT update
-- (0 to 1) only evaluates the WHEN. The function reaches the table through
-- TG_TABLE_SCHEMA and TG_TABLE_NAME.
--
-- The function's body keeps its semicolons inside its lines: the migration
-- is split into statements at lines that end with one.
CREATE OR REPLACE FUNCTION {{outbox_requeue_fn}}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
  EXECUTE format('UPDATE %I.%I SET next_retry_at = greatest(clock_timestamp(), created_at + interval ''1 microsecond'') WHERE id = $1 AND status = 0 AND next_retry_at <= created_at', TG_TABLE_SCHEMA, TG_TABLE_NAME) USING NEW.id; RETURN NULL; END $$;
DROP TRIGGER IF EXISTS {{outbox_requeue}} ON {{outbox}};
CREATE TRIGGER {{outbox_requeue}} AFTER UPDATE OF status ON {{outbox}}
FOR EACH ROW WHEN (OLD.status <> 0 AND NEW.status = 0 AND NEW.next_retry_at <= NEW.created_at) EXECUTE FUNCTION {{outbox_requeue_fn}}();
