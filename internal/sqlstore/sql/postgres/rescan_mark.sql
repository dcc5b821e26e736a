-- rescan_mark: the low-water mark, the highest id, and how long ago the
-- first row above the mark was written (how far back rescans walk).
SELECT h.lwm, coalesce((SELECT max(id) FROM {{outbox}}), 0),
  coalesce((SELECT extract(epoch FROM now() - o.created_at) FROM {{outbox}} AS o
            WHERE o.id > h.lwm ORDER BY o.id LIMIT 1), 0)::float8
FROM {{horizon}} AS h
