package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// createBiz creates the business table the producers write beside the
// outbox, and empties it.
func (rb *rateBench) createBiz(ctx context.Context) error {
	ddl := map[string]string{
		"postgres": "CREATE TABLE IF NOT EXISTS %s (id bigserial PRIMARY KEY, n bigint NOT NULL)",
		"mysql":    "CREATE TABLE IF NOT EXISTS %s (id BIGINT AUTO_INCREMENT PRIMARY KEY, n BIGINT NOT NULL)",
		"sqlite":   "CREATE TABLE IF NOT EXISTS %s (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)",
	}[rb.db.Dialect]
	if err := rb.exec(ctx, fmt.Sprintf(ddl, rb.biz)); err != nil {
		return fmt.Errorf("create %s: %w", rb.biz, err)
	}
	return rb.exec(ctx, "DELETE FROM "+rb.biz)
}

func (rb *rateBench) exec(ctx context.Context, q string) error {
	if rb.db.PG != nil {
		_, err := rb.db.PG.Pool().Exec(ctx, q)
		return err
	}
	_, err := rb.db.SQL.SQLDB().ExecContext(ctx, q)
	return err
}

// produce runs the producers for --duration, each committing its share of
// --rate transactions a second on a fixed schedule (one that falls behind
// commits back to back, never skips), and returns the commits achieved per
// second. With track, each commit's time goes to the receiver.
func (rb *rateBench) produce(ctx context.Context, tag string, track bool) (float64, error) {
	ro := rb.o.rateOpts
	tx, err := rb.txFunc()
	if err != nil {
		return 0, err
	}
	period := time.Duration(float64(time.Second) * float64(rb.conns) / float64(ro.rate))
	start := time.Now().Add(10 * time.Millisecond)
	end := start.Add(ro.duration)
	var commits atomic.Int64
	errc := make(chan error, rb.conns)
	var wg sync.WaitGroup
	for p := range rb.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := start.Add(period * time.Duration(p) / time.Duration(rb.conns))
			for seq := 0; next.Before(end); seq++ {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				next = next.Add(period)
				id := fmt.Sprintf("%s-%s-%d-%d", rb.prefix, tag, p, seq)
				if err := tx(ctx, id, int64(seq)); err != nil {
					errc <- fmt.Errorf("producer %d: %w", p, err)
					return
				}
				if track {
					rb.recv.commit(id, time.Now())
				}
				commits.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	select {
	case err := <-errc:
		return 0, err
	default:
	}
	return float64(commits.Load()) / elapsed.Seconds(), nil
}

// txFunc returns the producers' transaction: a business row and an outbox
// row, by plain SQL or through the Writer (--producer).
func (rb *rateBench) txFunc() (func(ctx context.Context, id string, n int64) error, error) {
	t := rb.db.Store.Tables().Outbox
	payload := func(n int64) string { return `{"n":` + strconv.FormatInt(n, 10) + `}` }
	msg := func(id string, n int64) outbox.Message {
		return outbox.Message{MsgID: id, Topic: "bench.rate", Payload: json.RawMessage(payload(n))}
	}
	writer := rb.o.rateOpts.producer == "writer"
	if rb.db.PG != nil {
		return rb.txFuncPG(t, writer, payload, msg)
	}
	bizQ := "INSERT INTO " + rb.biz + " (n) VALUES (?)"
	if writer {
		drv, ok := rb.db.Store.(outboxdriver.Driver[*sql.Tx])
		if !ok {
			return nil, fmt.Errorf("the %s driver takes no *sql.Tx", rb.db.Dialect)
		}
		w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, id string, n int64) error {
			return drv.RunInTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, bizQ, n); err != nil {
					return err
				}
				return w.Write(ctx, tx, msg(id, n))
			})
		}, nil
	}
	outQ := "INSERT INTO " + t + " (msg_id, topic, payload) VALUES (?, 'bench.rate', ?)"
	db := rb.db.SQL.SQLDB()
	return func(ctx context.Context, id string, n int64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err = tx.ExecContext(ctx, bizQ, n); err == nil {
			_, err = tx.ExecContext(ctx, outQ, id, payload(n))
		}
		if err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}, nil
}

// rateReceiver is the local webhook endpoint: it takes the time each
// message arrives and compares it with its commit.
type rateReceiver struct {
	url       string
	srv       *http.Server
	committed atomic.Int64

	mu      sync.Mutex
	commits map[string]time.Time
	got     map[string]time.Duration
	early   map[string]time.Time // arrived before the producer noted its commit
	last    time.Time
}

func startRateReceiver() (*rateReceiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("the receiver of --rate: %w", err)
	}
	r := &rateReceiver{url: "http://" + l.Addr().String() + "/"}
	r.reset()
	r.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.arrived(req.Header.Get("Ce-Id"), time.Now())
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

func (r *rateReceiver) close() { _ = r.srv.Close() }

func (r *rateReceiver) reset() {
	r.mu.Lock()
	r.commits, r.got, r.early, r.last = map[string]time.Time{}, map[string]time.Duration{}, map[string]time.Time{}, time.Time{}
	r.committed.Store(0)
	r.mu.Unlock()
}

// commit notes that the producer's COMMIT of id returned at t.
func (r *rateReceiver) commit(id string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.committed.Add(1)
	if at, ok := r.early[id]; ok {
		// Published before the producer saw its COMMIT return: latency 0.
		delete(r.early, id)
		r.got[id] = max(at.Sub(t), 0)
		return
	}
	r.commits[id] = t
}

func (r *rateReceiver) arrived(id string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.got[id]; dup {
		return
	}
	r.last = t
	if c, ok := r.commits[id]; ok {
		delete(r.commits, id)
		r.got[id] = t.Sub(c)
		return
	}
	r.early[id] = t
}

func (r *rateReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// latencies returns each message's commit→publish time in ms, and when the
// last arrived.
func (r *rateReceiver) latencies() ([]float64, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]float64, 0, len(r.got))
	for _, d := range r.got {
		out = append(out, d.Seconds()*1000)
	}
	return out, r.last
}

// txFuncPG is txFunc on PostgreSQL.
func (rb *rateBench) txFuncPG(t string, writer bool, payload func(int64) string, msg func(string, int64) outbox.Message) (func(ctx context.Context, id string, n int64) error, error) {
	pg := rb.db.PG
	bizQ := "INSERT INTO " + rb.biz + " (n) VALUES ($1)"
	if writer {
		w, err := outbox.NewWriter(pg, outbox.WriterConfig{})
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, id string, n int64) error {
			return pg.WriteOnCommit(ctx, w, func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error) {
				_, err := tx.Exec(ctx, bizQ, n)
				return []outbox.Message{msg(id, n)}, err
			})
		}, nil
	}
	outQ := "INSERT INTO " + t + " (msg_id, topic, payload) VALUES ($1, 'bench.rate', $2)"
	return func(ctx context.Context, id string, n int64) error {
		return pgx.BeginFunc(ctx, pg.Pool(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, bizQ, n); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, outQ, id, payload(n))
			return err
		})
	}, nil
}
