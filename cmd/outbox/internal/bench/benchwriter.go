package bench

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/outboxdriver"
)

// The business schema of the writer benchmark: an order is inserted and an
// account debited, the shape of most transactions that emit an event.
//
// Two shapes: "order" inserts an order and debits an account (two small
// statements); "transfer" is the demo's transfer: lock both accounts, check
// the balance, debit one and credit the other (four statements). On
// PostgreSQL two more: "batched" is the transfer with its debit and credit
// in one pgx batch, and the outbox insert queued into that batch
// (writerLoopBatched); "on-commit" is the transfer in outboxpgx's
// WriteOnCommit, which sends the outbox insert with the COMMIT
// (writerLoopOnCommit).
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

// benchTransferSQL holds the transfer's statements per dialect: lock and read
// both accounts in id order (so that concurrent transfers cannot deadlock),
// debit, credit.
var benchTransferSQL = map[string][3]string{
	"postgres": {
		`SELECT id, balance FROM outbox_bench_accounts WHERE id IN ($1, $2) ORDER BY id FOR UPDATE`,
		`UPDATE outbox_bench_accounts SET balance = balance - 1 WHERE id = $1`,
		`UPDATE outbox_bench_accounts SET balance = balance + 1 WHERE id = $1`,
	},
	"mysql": {
		`SELECT id, balance FROM outbox_bench_accounts WHERE id IN (?, ?) ORDER BY id FOR UPDATE`,
		`UPDATE outbox_bench_accounts SET balance = balance - 1 WHERE id = ?`,
		`UPDATE outbox_bench_accounts SET balance = balance + 1 WHERE id = ?`,
	},
	"sqlite": {
		`SELECT id, balance FROM outbox_bench_accounts WHERE id IN (?, ?) ORDER BY id`,
		`UPDATE outbox_bench_accounts SET balance = balance - 1 WHERE id = ?`,
		`UPDATE outbox_bench_accounts SET balance = balance + 1 WHERE id = ?`,
	},
}

// benchWriter measures what the outbox costs a business transaction: the
// same transaction with and without one outbox insert, --producers at a time,
// in alternating rounds so that both see the same machine; it prints the
// median of each and the median of the rounds' ratios (each ratio pairs two
// measurements taken seconds apart, which this noisy host needs).
func benchWriter(ctx context.Context, db *dbopen.Database, o *benchOptions, stdout io.Writer) error {
	stmts := benchBusinessSQL[db.Dialect]
	if err := execScript(ctx, db, stmts[0]); err != nil {
		return fmt.Errorf("writer bench: create business tables: %w", err)
	}
	round := o.round
	rounds := max(o.runs, 3)
	fmt.Fprintf(stdout, "bench writer: %s: producers=%d payload=%dB, %d rounds of %s each way per shape\n", db.Where, o.producers, o.payloadBytes, rounds, round)
	payload := benchPayload(o.payloadBytes)
	prefix := benchMsgIDPrefix + "w" + randomPrefix()
	ratios := map[string]float64{}
	var lastBase, lastWith float64
	shapes := []string{"order", "transfer"}
	if db.PG != nil {
		shapes = append(shapes, "batched", "on-commit")
	}
	for si, shape := range shapes {
		var base, with, rr []float64
		for r := 1; r <= rounds; r++ {
			withMsg := func(p int, i int64) outbox.Message {
				return outbox.Message{MsgID: fmt.Sprintf("%s-%d-%d-%d-%d", prefix, si, r, p, i), Topic: "order.placed", Payload: payload(int(i))}
			}
			// Alternate which variant goes first, so that neither always runs
			// on the warmer (or the more vacuumed) table.
			var b, w float64
			var err error
			if r%2 == 1 {
				if b, err = writerRound(ctx, db, shape, o.producers, round, nil); err == nil {
					w, err = writerRound(ctx, db, shape, o.producers, round, withMsg)
				}
			} else {
				if w, err = writerRound(ctx, db, shape, o.producers, round, withMsg); err == nil {
					b, err = writerRound(ctx, db, shape, o.producers, round, nil)
				}
			}
			if err != nil {
				return err
			}
			if b == 0 || w == 0 {
				return fmt.Errorf("writer bench: a round of %s, run on for %s, committed no transaction; is the database stalled?", round, writerRoundLimit)
			}
			base, with, rr = append(base, b), append(with, w), append(rr, w/b)
			fmt.Fprintf(stdout, "%s round %d: business tx alone %.0f tx/s, with outbox insert %.0f tx/s, ratio %.2f\n", shape, r, b, w, w/b)
		}
		ratios[shape] = median(rr)
		if shape == "transfer" {
			lastBase, lastWith = median(base), median(with)
		}
		fmt.Fprintf(stdout, "%s: median %.0f tx/s alone, %.0f tx/s with the outbox insert; median ratio of the rounds %.2f\n", shape, median(base), median(with), ratios[shape])
	}
	batched := ""
	if db.PG != nil {
		batched = fmt.Sprintf(" batched_ratio=%.2f on_commit_ratio=%.2f", ratios["batched"], ratios["on-commit"])
	}
	fmt.Fprintf(stdout, "result writer_ratio=%.2f order_ratio=%.2f base_tx_per_s=%.0f outbox_tx_per_s=%.0f%s\n",
		ratios["transfer"], ratios["order"], lastBase, lastWith, batched)
	return nil
}

func execScript(ctx context.Context, db *dbopen.Database, script string) error {
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

// txOps runs statements in a transaction of type TTx.
type txOps[TTx any] struct {
	exec  func(ctx context.Context, tx TTx, q string, args ...any) error
	query func(ctx context.Context, tx TTx, q string, args ...any) (rows int, err error)
}

var pgOps = txOps[pgx.Tx]{
	exec: func(ctx context.Context, tx pgx.Tx, q string, args ...any) error {
		_, err := tx.Exec(ctx, q, args...)
		return err
	},
	query: func(ctx context.Context, tx pgx.Tx, q string, args ...any) (int, error) {
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		n := 0
		for rows.Next() {
			n++
		}
		return n, rows.Err()
	},
}

var sqlOps = txOps[*sql.Tx]{
	exec: func(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	},
	query: func(ctx context.Context, tx *sql.Tx, q string, args ...any) (int, error) {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			n++
		}
		return n, rows.Err()
	},
}

// writerRoundLimit bounds how far a round runs past its length while it
// waits for its first commit.
const writerRoundLimit = 30 * time.Second

// writerRound runs producers for d, or past d until the first transaction
// commits (at most writerRoundLimit more), and returns committed transactions
// per second of the time it ran; with msg nil the transactions write no
// outbox row.
func writerRound(ctx context.Context, db *dbopen.Database, shape string, producers int, d time.Duration, msg func(p int, i int64) outbox.Message) (float64, error) {
	rctx, cancel := context.WithTimeout(ctx, d+writerRoundLimit)
	defer cancel()
	var n atomic.Int64
	go func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-rctx.Done():
			return
		case <-t.C:
		}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for n.Load() == 0 {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
		}
		cancel()
	}()
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	start := time.Now()
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			switch {
			case shape == "batched":
				err = writerLoopBatched(rctx, db.PG, p, &n, msg)
			case shape == "on-commit":
				err = writerLoopOnCommit(rctx, db.PG, p, &n, msg)
			case db.PG != nil:
				err = writerLoop(rctx, db.PG, pgOps, db.Dialect, shape, p, &n, msg)
			default:
				err = writerLoop(rctx, db.SQL, sqlOps, db.Dialect, shape, p, &n, msg)
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

func writerLoop[TTx any](ctx context.Context, d outboxdriver.Driver[TTx], ops txOps[TTx], dialect, shape string, p int,
	n *atomic.Int64, msg func(int, int64) outbox.Message) error {
	w, err := outbox.NewWriter(d, outbox.WriterConfig{})
	if err != nil {
		return err
	}
	order, transfer := benchBusinessSQL[dialect], benchTransferSQL[dialect]
	return producerLoop(ctx, d.RunInTx, p, n, func(ctx context.Context, tx TTx, from, to int, i int64) error {
		if shape == "transfer" {
			if err := runTransfer(ctx, ops, tx, transfer, from, to); err != nil {
				return err
			}
		} else {
			if err := ops.exec(ctx, tx, order[1], from); err != nil {
				return err
			}
			if err := ops.exec(ctx, tx, order[2], from); err != nil {
				return err
			}
		}
		if msg != nil {
			return w.Write(ctx, tx, msg(p, i))
		}
		return nil
	})
}

// writerLoopBatched runs the "batched" shape (PostgreSQL): the transfer with
// its debit and credit sent in one pgx batch after the locking read, and the
// outbox insert queued in the same batch (outboxpgx's QueueWrite), so that
// the outbox adds no round trip of its own.
func writerLoopBatched(ctx context.Context, d *outboxpgx.Driver, p int, n *atomic.Int64, msg func(int, int64) outbox.Message) error {
	w, err := outbox.NewWriter(d, outbox.WriterConfig{})
	if err != nil {
		return err
	}
	transfer := benchTransferSQL["postgres"]
	return producerLoop(ctx, d.RunInTx, p, n, func(ctx context.Context, tx pgx.Tx, from, to int, i int64) error {
		if err := lockAccounts(ctx, pgOps, tx, transfer[0], from, to); err != nil {
			return err
		}
		var b pgx.Batch
		b.Queue(transfer[1], from)
		b.Queue(transfer[2], to)
		if msg != nil {
			if err := d.QueueWrite(ctx, w, &b, msg(p, i)); err != nil {
				return err
			}
		}
		return tx.SendBatch(ctx, &b).Close()
	})
}

// writerLoopOnCommit runs the "on-commit" shape (PostgreSQL): the transfer in
// outboxpgx's WriteOnCommit, which sends the outbox insert together with the
// COMMIT. Without a message it is the same transfer, committed the same way.
func writerLoopOnCommit(ctx context.Context, d *outboxpgx.Driver, p int, n *atomic.Int64, msg func(int, int64) outbox.Message) error {
	w, err := outbox.NewWriter(d, outbox.WriterConfig{})
	if err != nil {
		return err
	}
	transfer := benchTransferSQL["postgres"]
	var out []outbox.Message
	run := func(ctx context.Context, body func(context.Context, pgx.Tx) error) error {
		return d.WriteOnCommit(ctx, w, func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error) {
			out = out[:0]
			err := body(ctx, tx)
			return out, err
		})
	}
	return producerLoop(ctx, run, p, n, func(ctx context.Context, tx pgx.Tx, from, to int, i int64) error {
		if msg != nil {
			out = append(out, msg(p, i))
		}
		return runTransfer(ctx, pgOps, tx, transfer, from, to)
	})
}

// producerLoop runs body in a transaction of its own (by run, a driver's
// RunInTx), over and over, with two different random accounts, until ctx
// ends, and counts the commits in n. Producer p draws its own accounts.
func producerLoop[TTx any](ctx context.Context, run func(context.Context, func(context.Context, TTx) error) error, p int, n *atomic.Int64,
	body func(ctx context.Context, tx TTx, from, to int, i int64) error) error {
	rnd := rand.New(rand.NewPCG(uint64(p), uint64(time.Now().UnixNano()))) //nolint:gosec // p counts producers from 0
	for i := int64(0); ctx.Err() == nil; i++ {
		from := rnd.IntN(1000) + 1
		to := (from+rnd.IntN(998))%1000 + 1
		err := run(ctx, func(ctx context.Context, tx TTx) error { return body(ctx, tx, from, to, i) })
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

// runTransfer runs the demo's transfer in tx: lock and read both accounts,
// debit one, credit the other.
func runTransfer[TTx any](ctx context.Context, ops txOps[TTx], tx TTx, stmts [3]string, from, to int) error {
	if err := lockAccounts(ctx, ops, tx, stmts[0], from, to); err != nil {
		return err
	}
	if err := ops.exec(ctx, tx, stmts[1], from); err != nil {
		return err
	}
	return ops.exec(ctx, tx, stmts[2], to)
}

// lockAccounts is the transfer's first step: lock and read both accounts.
func lockAccounts[TTx any](ctx context.Context, ops txOps[TTx], tx TTx, q string, from, to int) error {
	got, err := ops.query(ctx, tx, q, min(from, to), max(from, to))
	if err != nil {
		return err
	}
	if got != 2 {
		return fmt.Errorf("transfer: read %d accounts, want 2", got)
	}
	return nil
}
