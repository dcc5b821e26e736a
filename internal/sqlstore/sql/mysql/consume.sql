-- A duplicate is the key error (ErrUnique), which InnoDB rolls back alone,
-- leaving the transaction usable. Not ON DUPLICATE KEY UPDATE and "0 rows
-- affected": with clientFoundRows=true in the DSN MySQL counts the duplicate
-- as 1 row, the same as a new one.
INSERT INTO {{inbox}} (consumer_group, msg_id) VALUES (?, ?)
