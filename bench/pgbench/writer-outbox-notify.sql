\set a random(1, 1000)
BEGIN;
INSERT INTO outbox_bench_orders (account, amount) VALUES (:a, 1);
UPDATE outbox_bench_accounts SET balance = balance - 1 WHERE id = :a;
INSERT INTO outbox_bench (msg_id, topic, msg_key, payload, headers) VALUES ('p-' || :client_id || '-' || nextval('pgbseq'), 'order.placed', NULL, '{"n":1,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}', NULL) ON CONFLICT (msg_id) DO NOTHING;
SELECT pg_notify($$outbox_new$$, $$$$);
COMMIT;
