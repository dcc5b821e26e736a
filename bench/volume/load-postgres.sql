-- Fills an outbox table (migrated by `outbox migrate`) with :n rows spread
-- evenly over :days days of created_at, oldest first: the last :pending rows
-- are NEW, one row in :dead_every is DEAD, every other row is SENT a second
-- after it was created. Run with
--   psql -v n=10000000 -v days=7 -v pending=10000 -v dead_every=1000 -f load-postgres.sql
\set ON_ERROR_STOP on
\timing on
INSERT INTO outbox (msg_id, topic, msg_key, payload, headers, status, retries,
                    next_retry_at, created_at, sent_at, last_error, dead_at)
SELECT 'vol-' || i,
       'topic-' || (i % 8),
       'key-' || (i % 1000),
       jsonb_build_object('order', i, 'amount', i % 10000, 'currency', 'EUR',
                          'note', repeat('x', 120)),
       NULL,
       s,
       CASE s WHEN 2 THEN 10 ELSE 0 END,
       c,
       c,
       CASE s WHEN 1 THEN c + interval '1 second' END,
       CASE s WHEN 2 THEN 'broker refused: 503 Service Unavailable' END,
       CASE s WHEN 2 THEN c + interval '1 minute' END
FROM generate_series(1, :n) AS i,
     LATERAL (SELECT now() - (:days * interval '1 day') * (1 - i::float8 / :n) AS c) AS t,
     LATERAL (SELECT CASE WHEN i > :n - :pending THEN 0
                          WHEN i % :dead_every = 0 THEN 2
                          ELSE 1 END::smallint AS s) AS u
ORDER BY i;
ANALYZE outbox;
