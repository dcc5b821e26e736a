-- blockers: the marks already change an indexed status column, so the
-- key's index is (msg_key, status, id) and blockers reads only a key's NEW
-- (or DEAD) rows. It returns the batch's spelling of the key: msg_key
-- compares with PAD SPACE, so "k" and "k " are one key here. Args: the JSON
-- array of {k, hi, n}, again, then 2 when DEAD rows block (else 3).
SELECT b.k, o.id FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(128) PATH '$.k', hi BIGINT PATH '$.hi')) AS b
STRAIGHT_JOIN {{outbox}} AS o FORCE INDEX ({{outbox_key_idx}}) ON o.msg_key = b.k AND o.status = 0 AND o.id < b.hi
UNION ALL
SELECT b.k, o.id FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(128) PATH '$.k', hi BIGINT PATH '$.hi')) AS b
STRAIGHT_JOIN {{outbox}} AS o FORCE INDEX ({{outbox_key_idx}}) ON o.msg_key = b.k AND o.status = ? AND o.id < b.hi
