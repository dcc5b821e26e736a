-- stats_span is newest id minus oldest id plus one, each end read from the
-- primary key alone.
SELECT coalesce((SELECT max(id) FROM {{outbox}}) - (SELECT min(id) FROM {{outbox}}) + 1, 0)
