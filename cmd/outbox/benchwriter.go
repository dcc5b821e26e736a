package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox"
)

// The business schema of the writer benchmark: an order is inserted and an
// account debited, the shape of most transactions that emit an event.
var benchBusinessSQL = map[string][3]string{
	"postgres": {
		`CREATE TABLE IF NOT EXISTS outbox_bench_accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox_bench_orders (id BIGSERIAL PRIMARY KEY, account INT NOT NULL, amount BIGINT NOT NULL);
TRUNCATE outbox_bench_accounts, outbox_bench_orders;
INSERT INTO outbox_bench_accounts SELECT g, 1000000 FROM generate_series(1, 1000) g`,
		`INSERT INTO outbox_bench_orders (account, amount) VALUES ($1, 1)`,
		`UPDATE outbox_bench_accounts SET balance = balance - 1 WHERE id = $1`,
	},
	"mysql": {
		`CREATE TABLE IF NOT EXISTS outbox_bench_accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox_bench_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, account INT NOT NULL, amount BIGINT NOT NULL);
TRUNCATE outbox_bench_accounts;
TRUNCATE outbox_bench_orders;
INSERT INTO outbox_bench_accounts SELECT seq, 1000000 FROM seq_1_to_1000`,
		`INSERT INTO outbox_bench_orders (account, amount) VALUES (?, 1)`,
		`UPDATE outbox_bench_accounts SET balance = balance - 1 WHERE id = ?`,
	},
	"sqlite": {
		`CREATE TABLE IF NOT EXISTS outbox_bench_accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS outbox_bench_orders (id INTEGER PRIMARY KEY, account INTEGER NOT NULL, amount INTEGER NOT NULL);
DELETE FROM outbox_bench_accounts;
DELETE FROM outbox_bench_orders;
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 1000) INSERT INTO outbox_bench_accounts SELECT n, 1000000 FROM g`,
		`INSERT INTO outbox_bench_orders (account, amount) VALUES (?, 1)`,
		`UPDATE outbox_bench_accounts SET balance = balance - 1 WHERE id = ?`,
	},
}

// benchWriter measures what the outbox costs a business transaction: the
// same transaction with and without one outbox insert, --producers at a time,
// in alternating rounds so that both see the same machine; it prints the
// median of each and their ratio.
func benchWriter(ctx context.Context, db *database, o *benchOptions, stdout io.Writer) error {
	stmts := benchBusinessSQL[db.Dialect]
	if err := execScript(ctx, db, stmts[0]); err != nil {
		return fmt.Errorf("writer bench: create business tables: %w", err)
	}
	round := 3 * time.Second
	rounds := max(o.runs, 3)
	fmt.Fprintf(stdout, "bench writer: %s: producers=%d payload=%dB, %d rounds of %s each way\n", db.where, o.producers, o.payloadBytes, rounds, round)
	payload := benchPayload(o.payloadBytes)
	prefix := randomPrefix()
	var base, with []float64
	for r := 1; r <= rounds; r++ {
		b, err := writerRound(ctx, db, stmts, o.producers, round, nil)
		if err != nil {
			return err
		}
		w, err := writerRound(ctx, db, stmts, o.producers, round, func(p int, i int64) outbox.Message {
			return outbox.Message{MsgID: fmt.Sprintf("w%s-%d-%d-%d", prefix, r, p, i), Topic: "order.placed", Payload: payload(int(i))}
		})
		if err != nil {
			return err
		}
		base, with = append(base, b), append(with, w)
		fmt.Fprintf(stdout, "round %d: business tx alone %.0f tx/s, with outbox insert %.0f tx/s, ratio %.2f\n", r, b, w, w/b)
	}
	fmt.Fprintf(stdout, "result writer_ratio=%.2f base_tx_per_s=%.0f outbox_tx_per_s=%.0f\n", median(with)/median(base), median(base), median(with))
	return nil
}

func execScript(ctx context.Context, db *database, script string) error {
	for _, stmt := range splitScript(script) {
		var err error
		if db.PG != nil {
			_, err = db.PG.Pool().Exec(ctx, stmt)
		} else {
			_, err = db.SQL.SQLDB().ExecContext(ctx, stmt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func splitScript(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ";\n") {
		if strings.TrimSpace(part) != "" {
			out = append(out, part)
		}
	}
	return out
}

// writerRound runs producers for d and returns committed transactions per
// second; with msg nil the transactions write no outbox row.
func writerRound(ctx context.Context, db *database, stmts [3]string, producers int, d time.Duration, msg func(p int, i int64) outbox.Message) (float64, error) {
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	start := time.Now()
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if db.PG != nil {
				err = writerLoop(rctx, db.PG, p, &n, msg, func(ctx context.Context, tx pgx.Tx, q string, a any) error {
					_, err := tx.Exec(ctx, q, a)
					return err
				}, stmts)
			} else {
				err = writerLoop(rctx, db.SQL, p, &n, msg, func(ctx context.Context, tx *sql.Tx, q string, a any) error {
					_, err := tx.ExecContext(ctx, q, a)
					return err
				}, stmts)
			}
			if err != nil && rctx.Err() == nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

func writerLoop[TTx any](ctx context.Context, d outbox.Driver[TTx], p int, n *atomic.Int64, msg func(int, int64) outbox.Message,
	exec func(context.Context, TTx, string, any) error, stmts [3]string) error {
	w, err := outbox.NewWriter(d, outbox.WriterConfig{})
	if err != nil {
		return err
	}
	rnd := rand.New(rand.NewPCG(uint64(p), uint64(time.Now().UnixNano())))
	for i := int64(0); ctx.Err() == nil; i++ {
		account := rnd.IntN(1000) + 1
		err := d.RunInTx(ctx, func(ctx context.Context, tx TTx) error {
			if err := exec(ctx, tx, stmts[1], account); err != nil {
				return err
			}
			if err := exec(ctx, tx, stmts[2], account); err != nil {
				return err
			}
			if msg != nil {
				return w.Write(ctx, tx, msg(p, i))
			}
			return nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		n.Add(1)
	}
	return nil
}
