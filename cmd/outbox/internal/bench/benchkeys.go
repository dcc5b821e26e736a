package bench

import (
	"context"
	"errors"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"time"

	"github.com/outbox-go/outbox"
)

// benchKeys runs `outbox bench --keys N`: each run relays --messages without
// keys and then spread over N keys (the keyed relay checks each batch's keys
// for earlier messages still pending), and with --blocked once more with the
// first message of one key refused every time, which holds back that key's
// other messages. It prints keyed/unkeyed and, with --blocked, the other
// keys' rate over the keyed rate, per run and as medians.
func benchKeys(ctx context.Context, db *dbopen.Database, pubs []outbox.Publisher, o *benchOptions, stdout io.Writer) error {
	fmt.Fprintf(stdout, "bench keys: %s, broker %s: messages=%d keys=%d batch=%d relays=%d payload=%dB runs=%d\n",
		db.Where, cli.RedactDSN(o.broker), o.messages, o.keys, o.batch, o.relays, o.payloadBytes, o.runs)
	prefix := benchMsgIDPrefix + randomPrefix()
	var keyedRatios, blockedRatios, rates []float64
	for run := 1; run <= o.runs; run++ {
		unkeyed, keyed := *o, *o
		keyed.fillKeys = o.keys
		// Alternate which goes first, so that neither always meets the
		// table after the other's rows.
		order := []*benchOptions{&unkeyed, &keyed}
		if run%2 == 0 {
			order = []*benchOptions{&keyed, &unkeyed}
		}
		res := map[*benchOptions]benchResult{}
		for i, ro := range order {
			r, err := benchRun(ctx, db, pubs, ro, fmt.Sprintf("%s-%d-%d", prefix, run, i))
			if err != nil {
				return err
			}
			res[ro] = r
		}
		if ctx.Err() != nil {
			return errors.New("bench interrupted")
		}
		u, k := res[&unkeyed], res[&keyed]
		keyedRatios, rates = append(keyedRatios, k.rate()/u.rate()), append(rates, k.rate())
		fmt.Fprintf(stdout, "run %d: unkeyed %d msgs in %s = %.0f msgs/s; keyed %d msgs in %s = %.0f msgs/s (%d held back); keyed/unkeyed = %.2f\n",
			run, u.done, u.elapsed.Round(time.Millisecond), u.rate(), k.done, k.elapsed.Round(time.Millisecond), k.rate(), k.heldBack, k.rate()/u.rate())
		if !o.blocked {
			continue
		}
		b, err := benchBlocked(ctx, db, pubs, o, fmt.Sprintf("%s-%d-b", prefix, run))
		if err != nil {
			return err
		}
		blockedRatios = append(blockedRatios, b.rate()/k.rate())
		fmt.Fprintf(stdout, "run %d: one key blocked: the other keys' %d msgs in %s = %.0f msgs/s; blocked/keyed = %.2f\n",
			run, b.done, b.elapsed.Round(time.Millisecond), b.rate(), b.rate()/k.rate())
	}
	fmt.Fprintf(stdout, "median keyed/unkeyed = %.2f\n", median(keyedRatios))
	line := fmt.Sprintf("result msgs_per_s=%.0f keyed_ratio=%.2f", median(rates), median(keyedRatios))
	if o.blocked {
		fmt.Fprintf(stdout, "median blocked/keyed = %.2f\n", median(blockedRatios))
		line += fmt.Sprintf(" blocked_ratio=%.2f", median(blockedRatios))
	}
	fmt.Fprintln(stdout, line)
	return nil
}

// benchBlocked relays --messages over --keys keys with the first message
// (key 0's first) refused every time: the key's other messages wait behind
// it, and the run ends when every other message is sent. Its rows stay NEW
// until the table is emptied.
func benchBlocked(ctx context.Context, db *dbopen.Database, pubs []outbox.Publisher, o *benchOptions, prefix string) (benchResult, error) {
	blocked := prefix + "-0"
	wrapped := make([]outbox.Publisher, len(pubs))
	for i, p := range pubs {
		wrapped[i] = refuseOne(p, blocked)
	}
	ro := *o
	ro.fillKeys = o.keys
	ro.blockedMsgs = (o.messages + o.keys - 1) / o.keys // key 0's messages
	return benchRun(ctx, db, wrapped, &ro, prefix)
}

// refuseOne publishes through p, except the message msgID, which it refuses,
// and the later messages of its key in the same batch, which it holds back.
func refuseOne(p outbox.Publisher, msgID string) outbox.Publisher {
	return outbox.BatchPublishFunc(func(ctx context.Context, msgs []outbox.Message) []error {
		at := -1
		for i := range msgs {
			if msgs[i].MsgID == msgID {
				at = i
				break
			}
		}
		if at < 0 {
			return p.Publish(ctx, msgs)
		}
		key := msgs[at].Key
		var rest []outbox.Message
		var idx []int
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			switch {
			case i == at:
				errs[i] = errors.New("refused on purpose (bench --blocked)")
			case i > at && m.Key == key:
				errs[i] = outbox.ErrHeldBack
			default:
				rest, idx = append(rest, m), append(idx, i)
			}
		}
		got := p.Publish(ctx, rest)
		for k, i := range idx {
			if got != nil {
				errs[i] = got[k]
			}
		}
		return errs
	})
}

// benchWriterKeys runs `outbox bench --writer --keys N`: rounds of the
// business transaction with an outbox insert without a key and with one of
// N keys, alternating which goes first, and prints keyed/unkeyed per shape.
func benchWriterKeys(ctx context.Context, db *dbopen.Database, o *benchOptions, stdout io.Writer) error {
	stmts := benchBusinessSQL[db.Dialect]
	if err := execScript(ctx, db, stmts[0]); err != nil {
		return fmt.Errorf("writer bench: create business tables: %w", err)
	}
	rounds := max(o.runs, 3)
	fmt.Fprintf(stdout, "bench writer keys: %s: producers=%d keys=%d payload=%dB, %d rounds of %s each way per shape\n",
		db.Where, o.producers, o.keys, o.payloadBytes, rounds, o.round)
	payload := benchPayload(o.payloadBytes)
	prefix := benchMsgIDPrefix + "wk" + randomPrefix()
	ratios := map[string]float64{}
	for si, shape := range []string{"order", "transfer"} {
		var rr []float64
		for r := 1; r <= rounds; r++ {
			msgOf := func(keys int) func(p int, i int64) outbox.Message {
				return func(p int, i int64) outbox.Message {
					return outbox.Message{MsgID: fmt.Sprintf("%s-%d-%d-%d-%d-%d", prefix, si, r, keys, p, i), Topic: "order.placed",
						Key: benchKey(keys, int(i)*o.producers+p), Payload: payload(int(i))}
				}
			}
			var u, k float64
			var err error
			if r%2 == 1 {
				if u, err = writerRound(ctx, db, shape, o.producers, o.round, msgOf(0)); err == nil {
					k, err = writerRound(ctx, db, shape, o.producers, o.round, msgOf(o.keys))
				}
			} else if k, err = writerRound(ctx, db, shape, o.producers, o.round, msgOf(o.keys)); err == nil {
				u, err = writerRound(ctx, db, shape, o.producers, o.round, msgOf(0))
			}
			if err != nil {
				return err
			}
			if u == 0 || k == 0 {
				return fmt.Errorf("writer bench: a round of %s, run on for %s, committed no transaction; is the database stalled?", o.round, writerRoundLimit)
			}
			rr = append(rr, k/u)
			fmt.Fprintf(stdout, "%s round %d: unkeyed %.0f tx/s, keyed %.0f tx/s, keyed/unkeyed %.2f\n", shape, r, u, k, k/u)
		}
		ratios[shape] = median(rr)
		fmt.Fprintf(stdout, "%s: median keyed/unkeyed of the rounds %.2f\n", shape, ratios[shape])
	}
	fmt.Fprintf(stdout, "result writer_keyed_ratio=%.2f order_keyed_ratio=%.2f\n", ratios["transfer"], ratios["order"])
	return nil
}
