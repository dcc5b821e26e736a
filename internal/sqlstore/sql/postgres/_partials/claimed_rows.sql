-- claimed_rows returns the rows of due in the chunks held recorded, then,
-- if due read rows of a chunk held could not record (it changed after the
-- statement's snapshot), one row with id 0, so that the claim can look
-- again with a new snapshot.
SELECT d.id, d.msg_id, d.topic, d.msg_key, d.payload, d.headers, d.retries, d.created_at, d.next_retry_at, d.ctid::text
FROM due AS d, async
WHERE d.id >> 8 IN (SELECT chunk FROM held)
UNION ALL
SELECT 0, '', '', NULL, NULL, NULL, 0, now(), now(), ''
WHERE (SELECT count(*) FROM want) > (SELECT count(*) FROM held)
