UPDATE OR FAIL {{outbox}} SET next_retry_at = coalesce((
    SELECT CASE b.status
      WHEN 0 THEN CASE WHEN b.next_retry_at > strftime('%Y-%m-%d %H:%M:%f', 'now')
        THEN strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', ?3 / 1000.0)) ELSE b.next_retry_at END
      WHEN 2 THEN strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', ?2 / 1000.0))
      ELSE strftime('%Y-%m-%d %H:%M:%f', 'now') END
    FROM {{outbox}} AS b WHERE b.id = f.b), strftime('%Y-%m-%d %H:%M:%f', 'now'))
FROM (SELECT value ->> '$[0]' AS id, value ->> '$[1]' AS b FROM json_each(?1)) AS f
WHERE {{outbox}}.id = f.id AND {{outbox}}.status = 0
