-- blockers: as MySQL, an index on (msg_key, status, id), here partial
-- on msg_key IS NOT NULL, so rows without a key are not in it. Args: the
-- JSON array of {k, hi, n}, then 2 when DEAD rows block (else 3).
SELECT b.value ->> '$.k', o.id FROM json_each(?1) AS b
CROSS JOIN {{outbox}} AS o INDEXED BY {{outbox_key_idx}}
WHERE o.msg_key = b.value ->> '$.k' AND o.status IN (0, ?2) AND o.id < b.value ->> '$.hi'
