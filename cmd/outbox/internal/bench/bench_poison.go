package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/brokers"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/outbox-go/outbox"
)

// poisonMarker is in the payload of the poison row of `outbox bench
// --poison`; the local receiver drops the connection of every request that
// carries it.
const poisonMarker = "outbox-bench-poison"

// benchPoison runs `outbox bench --poison`: each run relays --messages N
// twice on the emptied table, once as they are and once with one poison
// row among them (after the first half) that the transport cannot carry.
// Through a webhook (--broker discard:, the default) it publishes to a
// receiver of its own, which drops the connection of every POST of the
// poison; through RabbitMQ (--broker amqp://...) the poison has a header
// of 200 KB, over the broker's frame size, on which the broker closes the
// connection. The relay runs with the default retry settings; the poison
// stays NEW (its retry budget is a day) and is left out of the count. It
// prints both rates and their ratio; its last line is `result
// msgs_per_s=<healthy> poisoned_msgs_per_s=<n> poison_ratio=<n>` (medians
// over --runs).
func benchPoison(ctx context.Context, db *dbopen.Database, o *benchOptions, stdout io.Writer) error {
	target, err := newPoisonTarget(ctx, o, stdout)
	if err != nil {
		return err
	}
	defer target.close()
	pub, closePub, err := brokers.Open(ctx, target.url, o.pub)
	if err != nil {
		return err
	}
	defer closePub()
	pubs := []outbox.Publisher{pub}
	st := rawStore(db)
	fmt.Fprintf(stdout, "bench: %s, %s: messages=%d batch=%d relays=%d payload=%dB runs=%d\n",
		db.Where, target.where, o.messages, o.batch, o.relays, o.payloadBytes, o.runs)
	prefix := benchMsgIDPrefix + randomPrefix()
	var healthy, poisoned, ratios []float64
	for run := 1; run <= o.runs; run++ {
		// Alternate which goes first, so that neither always meets a
		// fresh table or warm caches.
		var rates [2]float64
		for k := range 2 {
			withPoison := (run+k)%2 == 0
			if err := st.Truncate(ctx); err != nil {
				return err
			}
			ro := *o
			name := fmt.Sprintf("%s-h%d", prefix, run)
			if withPoison {
				name = fmt.Sprintf("%s-p%d", prefix, run)
				ro.poison = target.poison(name + "-poison")
			}
			res, err := benchRun(ctx, db, pubs, &ro, name)
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				return errors.New("bench interrupted")
			}
			what := "healthy"
			if withPoison {
				if res.poisonFailed == 0 {
					return fmt.Errorf("run %d: the relay never attempted the poison, so the run measured nothing", run)
				}
				what = fmt.Sprintf("with a poison (%d failed attempts of it)", res.poisonFailed)
				rates[1] = res.rate()
			} else {
				rates[0] = res.rate()
			}
			fmt.Fprintf(stdout, "run %d %s: %d msgs in %s = %.0f msgs/s%s\n",
				run, what, res.done, res.elapsed.Round(time.Millisecond), res.rate(), res.extra())
		}
		healthy, poisoned = append(healthy, rates[0]), append(poisoned, rates[1])
		ratios = append(ratios, rates[1]/rates[0])
		fmt.Fprintf(stdout, "run %d poison ratio: %.0f / %.0f = %.2f\n", run, rates[1], rates[0], rates[1]/rates[0])
	}
	if err := st.Truncate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "result msgs_per_s=%.0f poisoned_msgs_per_s=%.0f poison_ratio=%.2f\n", median(healthy), median(poisoned), median(ratios))
	return nil
}

// poisonTarget is where `outbox bench --poison` publishes, and the poison
// that its transport cannot carry.
type poisonTarget struct {
	url    string // the --broker URL of the publisher
	where  string // for the first line
	poison func(msgID string) *outbox.Message
	close  func()
}

// newPoisonTarget starts the local webhook receiver (--broker discard:) or
// prepares RabbitMQ (--broker amqp://...) for benchPoison.
func newPoisonTarget(ctx context.Context, o *benchOptions, stdout io.Writer) (*poisonTarget, error) {
	scheme, _, _ := strings.Cut(strings.ToLower(o.broker), ":")
	switch scheme {
	case "discard":
		recv, err := startPoisonReceiver()
		if err != nil {
			return nil, err
		}
		return &poisonTarget{url: recv.url, where: "a webhook to a local receiver at " + recv.url + " that drops the connection on the poison",
			poison: func(msgID string) *outbox.Message {
				return &outbox.Message{MsgID: msgID, Topic: benchTopic, Payload: json.RawMessage(`{"poison":"` + poisonMarker + `"}`)}
			}, close: recv.close}, nil
	case "amqp", "amqps":
		bb, err := newBrokerBench(ctx, o.broker, stdout)
		if err != nil {
			return nil, err
		}
		return &poisonTarget{url: bb.url, where: "RabbitMQ at " + cli.RedactDSN(o.broker) + ", the poison with a header of 200 KB",
			poison: func(msgID string) *outbox.Message {
				return &outbox.Message{MsgID: msgID, Topic: benchTopic, Payload: json.RawMessage(`{"poison":true}`),
					Headers: map[string]string{"big": strings.Repeat("x", 200<<10)}}
			}, close: bb.close}, nil
	}
	return nil, fmt.Errorf("--poison publishes to a local webhook receiver (--broker discard:, the default) or to RabbitMQ (--broker amqp://...), not %s:", scheme)
}

// poisonReceiver is a webhook receiver on 127.0.0.1 that answers 204 to
// every message, except that it drops the connection, unanswered, of every
// request whose body holds poisonMarker.
type poisonReceiver struct {
	url string
	srv *http.Server
}

func startPoisonReceiver() (*poisonReceiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("the receiver of --poison: %w", err)
	}
	r := &poisonReceiver{url: "http://" + l.Addr().String() + "/"}
	r.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if !bytes.Contains(body, []byte(poisonMarker)) {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
	})}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

func (r *poisonReceiver) close() { _ = r.srv.Close() }
