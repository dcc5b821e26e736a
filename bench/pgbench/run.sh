#!/usr/bin/env bash
# PostgreSQL-only measurements behind the design notes in CHANGELOG.md and the
# README's performance section, with pgbench and no Go in the loop:
#   claim: one vs two clients claiming batches of 500 with per-row locks
#          (FOR UPDATE SKIP LOCKED), with chunk advisory locks (what the relay
#          does), and with chunk locks on a table without a status index
#          (fillfactor 50, so that the SENT update is HOT: the next design step);
#   writer: a small business transaction alone, with an outbox insert, and with
#          an outbox insert plus pg_notify.
# Needs the outbox_bench tables: run `outbox bench --db ... --messages 1000` once.
set -euo pipefail
cd "$(dirname "$0")"
CONN=${CONN:-"host=127.0.0.1 user=postgres dbname=test sslmode=disable"}
ROWS=${ROWS:-300000}
psql() { command psql -q "$CONN" "$@"; }
pgb() { pgbench -n -M prepared "$@" "$CONN" 2>/dev/null | awk '/^tps/ {print $3}'; }

psql <<SQL
CREATE TABLE IF NOT EXISTS outbox_hot (LIKE outbox_bench INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY) WITH (fillfactor = 50);
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_indexes WHERE tablename = 'outbox_hot' AND indexname = 'outbox_hot_pkey') THEN
    ALTER TABLE outbox_hot ADD PRIMARY KEY (id); ALTER TABLE outbox_hot ADD UNIQUE (msg_id);
  END IF;
END \$\$;
CREATE SEQUENCE IF NOT EXISTS pgbseq;
SQL

fill() {
  psql -c "TRUNCATE $1" \
    -c "INSERT INTO $1 (msg_id, topic, payload) SELECT 'f-' || g, 'bench', ('{\"n\":' || g || ',\"pad\":\"' || repeat('x', 170) || '\"}')::jsonb FROM generate_series(1, $ROWS) g" \
    -c "VACUUM ANALYZE $1" -c "CHECKPOINT"
}

for script in claim-rowlocks claim-chunklocks claim-hot; do
  table=outbox_bench; [ "$script" = claim-hot ] && table=outbox_hot
  for clients in 1 2; do
    fill "$table"
    tps=$(pgb -D cur=0 -c "$clients" -j "$clients" -t $((280 / clients)) -f "$script.sql")
    echo "$script clients=$clients: $(awk -v t="$tps" 'BEGIN {printf "%.0f", t * 500}') msgs/s"
  done
done

psql <<'SQL'
CREATE TABLE IF NOT EXISTS outbox_bench_accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox_bench_orders (id BIGSERIAL PRIMARY KEY, account INT NOT NULL, amount BIGINT NOT NULL);
INSERT INTO outbox_bench_accounts SELECT g, 1000000 FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING;
SQL
for script in writer-base writer-outbox writer-outbox-notify; do
  echo "$script: $(pgb -c 8 -j 2 -T 4 -f "$script.sql") tx/s"
done
