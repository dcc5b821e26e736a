-- list_columns are the columns of list, of the rows named o.
o.id, o.msg_id, o.topic, o.msg_key, o.status, o.retries, o.next_retry_at, o.created_at, o.sent_at, o.last_error, o.dead_at
