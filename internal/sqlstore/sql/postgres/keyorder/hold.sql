-- hold sets a held row's next_retry_at to its blocker's, but past its
-- created_at, so that the row enters the requeued index and rescans still
-- find it below the low-water mark. Args: a JSON array of [id, blocker];
-- the wait behind a DEAD blocker in ms; the wait behind a blocker that waits
-- out a backoff in ms.
UPDATE {{outbox}} AS o SET next_retry_at = greatest(CASE b.status
    WHEN 0 THEN CASE WHEN b.next_retry_at > clock_timestamp()
      THEN clock_timestamp() + $3 * interval '1 millisecond' ELSE b.next_retry_at END
    WHEN 2 THEN clock_timestamp() + $2 * interval '1 millisecond'
    ELSE clock_timestamp() END, o.created_at + interval '1 microsecond')
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS blocker FROM jsonb_array_elements($1::jsonb) AS e) AS f
JOIN {{outbox}} AS b ON b.id = f.blocker
WHERE o.id = f.id AND o.status = 0
