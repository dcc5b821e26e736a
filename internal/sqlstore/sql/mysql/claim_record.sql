-- args: a JSON array of the ids, the token, the lease in microseconds. A
-- lease that ran out is taken over.
INSERT INTO {{claims}} (id, token, until)
SELECT j.i, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
FROM JSON_TABLE(?, '$[*]' COLUMNS (i BIGINT PATH '$')) AS j
ON DUPLICATE KEY UPDATE token = VALUES(token), until = VALUES(until)
