-- backlog_setup keeps the plan of backlog on the indexes (the planner
-- cannot know the mark) and in one process.
SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL jit = off
