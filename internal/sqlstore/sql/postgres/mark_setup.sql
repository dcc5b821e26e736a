-- The marks reach their rows by ctid (see mark_sent). With no statistics (a
-- new table) the planner would take a scan of the whole table for cheaper
-- than a TID scan, and with a generic plan, which counts ten rows in a
-- parameter array, a nested loop that compares every row with every pair.
SET LOCAL enable_seqscan = off; SET LOCAL enable_nestloop = off; SET LOCAL jit = off
