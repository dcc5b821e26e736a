\set a random(1, 1000)
BEGIN;
INSERT INTO outbox_bench_orders (account, amount) VALUES (:a, 1);
UPDATE outbox_bench_accounts SET balance = balance - 1 WHERE id = :a;

COMMIT;
