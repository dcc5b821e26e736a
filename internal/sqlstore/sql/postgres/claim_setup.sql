-- Without a status index the planner could judge a sequential scan and a
-- sort cheaper than walking an index when its statistics say few rows are
-- pending (they are: past the cursor). Each claim's transaction tells it
-- otherwise, so the plan does not depend on statistics or on whether a
-- prepared statement's plan is generic. JIT goes off with them: the
-- planner's penalty for a disabled plan would push any plan's cost past the
-- point where PostgreSQL compiles it.
SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off; SET LOCAL jit = off
