-- backlog_mark is the low-water mark, or 0 when the id sequence has a new
-- relfilenode (see sweep_check).
SELECT CASE WHEN h.seq_node = s.node THEN h.lwm ELSE 0 END FROM {{horizon}} AS h, ({{> seq_node}}) AS s
