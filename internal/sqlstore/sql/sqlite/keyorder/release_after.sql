UPDATE OR FAIL {{outbox}} SET next_retry_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE status = 0 AND next_retry_at > strftime('%Y-%m-%d %H:%M:%f', 'now')
  AND id IN (SELECT o.id FROM json_each(?1) AS f
    CROSS JOIN {{outbox}} AS o INDEXED BY {{outbox_key_idx}}
    WHERE o.msg_key = f.value ->> '$[0]' AND o.status = 0 AND o.id > f.value ->> '$[1]')
