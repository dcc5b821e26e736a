-- The rows are found by a scan of the heap and deleted by their ctid, which
-- the scan read in the same statement.
DELETE FROM {{inbox}} WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM {{inbox}} WHERE consumed_at < now() - $1 * interval '1 millisecond' LIMIT $2))
