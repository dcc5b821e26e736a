// Package demo runs "outbox demo": a money transfer end to end through the
// real writer, relay and inbox on embedded SQLite, optionally through NATS.
package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
)

// demoText is the narrative, in Chinese (the pattern's classic telling) and in English.
var demoText = map[string]map[string]string{
	"zh": {
		"committed": "本地事务提交完成（业务 + 消息一起落库）",
		"accounts":  "账户：alice=%d bob=%d",
		"message":   "消息 %s status=%d retries=%d",
		"applied":   "下游已处理：[%s]",
		"start":     "— relay 开始扫描，前两次 MQ 超时",
		"round":     "— 第 %d 轮 relay",
		"failed":    "✗ %s 投递失败（第 %d 次）：%v",
		"dead":      "☠ %s 重试 %d 次仍失败，转死信并告警",
		"sent":      "✓ %s 投递成功",
		"nothing":   "   （无新消息）",
		"consume":   "— 消费：MQ 至少一次投递，同一条消息到达两次",
		"effect":    "→ 消费 %s：%s（发积分 / 发通知）",
		"duplicate": "↺ 消费 %s：重复消息，丢弃",
		"timeout":   "MQ 超时",
		"note":      "%s→%s %d 元",
		"kept":      "数据库文件保留在 %s",
		"broker":    "MQ：内嵌 NATS JetStream（%s）",
		"acklost":   "   （第一次处理后 ack 丢失，JetStream 重新投递）",
	},
	"en": {
		"committed": "local transaction committed (business change + message stored together)",
		"accounts":  "accounts: alice=%d bob=%d",
		"message":   "message %s status=%d retries=%d",
		"applied":   "applied downstream: [%s]",
		"start":     "— relay starts scanning; the first two publishes time out",
		"round":     "— relay round %d",
		"failed":    "✗ %s publish failed (attempt %d): %v",
		"dead":      "☠ %s still failing after %d attempts: DEAD, alert raised",
		"sent":      "✓ %s published",
		"nothing":   "   (no new messages)",
		"consume":   "— consume: the broker delivers at least once; the same message arrives twice",
		"effect":    "→ consume %s: %s (award points / notify)",
		"duplicate": "↺ consume %s: duplicate, discarded",
		"timeout":   "broker timeout",
		"note":      "%s→%s %d",
		"kept":      "database files kept in %s",
		"broker":    "broker: embedded NATS JetStream (%s)",
		"acklost":   "   (the first ack is lost after the commit, so JetStream delivers the message again)",
	},
}

// Run runs `outbox demo`: a money transfer, end to end through the real
// writer, relay and inbox on two embedded SQLite databases (the bank's, with
// its outbox, and the points service's, with its inbox). The publisher fails
// twice, the broker delivers the message twice, the effect happens once.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := cli.NewFlagSet("outbox demo", "[flags]",
		"run a money transfer end to end on embedded SQLite, no set-up", stdout)
	var dir, lang, broker string
	f.StringVar(&dir, "dir", "", "DIR", "keep the two SQLite files in DIR (default: a temporary directory, removed afterwards)")
	f.StringVar(&broker, "broker", "", "nats|URL",
		"carry the message through a real broker: nats starts an embedded NATS JetStream server in this process; "+
			"a nats:// URL uses that server (default: an in-process queue)")
	f.StringVar(&lang, "lang", "zh", "zh|en", "language of the narrative (zh or en)")
	f.CommandLineOnly("it needs no set-up and runs the same in every\n" +
		"shell; a relay's OUTBOX_BROKER must not carry its made-up transfer to a real broker.")
	f.Example("outbox demo")
	f.Example("outbox demo --lang en --dir /tmp/outbox-demo")
	f.Example("outbox demo --broker nats")
	pos, err := f.Parse(args)
	if err != nil {
		return err
	}
	if err := cli.NoArgs(f, pos); err != nil {
		return err
	}
	text, ok := demoText[lang]
	if !ok {
		return cli.Usagef(f.Hint(), "--lang must be zh or en")
	}
	if broker != "" && broker != "nats" && !strings.HasPrefix(broker, "nats://") {
		return cli.Usagef(f.Hint(), "--broker must be nats (embedded) or a nats:// URL")
	}
	keep := dir != ""
	if !keep {
		if dir, err = os.MkdirTemp("", "outbox-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	d, err := newDemo(ctx, dir, text)
	if err != nil {
		return err
	}
	defer d.close()
	if broker != "" {
		natsURL := broker
		if broker == "nats" {
			srv, err := startEmbeddedNATS(filepath.Join(dir, "nats"))
			if err != nil {
				return err
			}
			defer srv.stop()
			natsURL = srv.url
		}
		return d.runNATS(ctx, stdout, natsURL, keep, dir)
	}
	if err := d.run(ctx, stdout); err != nil {
		return err
	}
	if keep {
		fmt.Fprintf(stdout, "\n"+text["kept"]+"\n", dir)
	}
	return nil
}

type demo struct {
	text     map[string]string
	bankDB   *sql.DB
	bank     *outboxsqlite.Driver
	pointsDB *sql.DB
	points   *outboxsqlite.Driver
}

func newDemo(ctx context.Context, dir string, text map[string]string) (*demo, error) {
	d := &demo{text: text}
	var err error
	for _, p := range []string{"bank.db", "points.db"} {
		os.Remove(filepath.Join(dir, p))
	}
	if d.bankDB, d.bank, err = openDemoDB(ctx, filepath.Join(dir, "bank.db")); err != nil {
		return nil, err
	}
	if d.pointsDB, d.points, err = openDemoDB(ctx, filepath.Join(dir, "points.db")); err != nil {
		d.bankDB.Close()
		return nil, err
	}
	setup := []struct {
		db   *sql.DB
		stmt string
	}{
		{d.bankDB, "CREATE TABLE accounts (name TEXT PRIMARY KEY, balance INTEGER NOT NULL CHECK (balance >= 0))"},
		{d.bankDB, "INSERT INTO accounts (name, balance) VALUES ('alice', 1000), ('bob', 0)"},
		{d.pointsDB, "CREATE TABLE notes (id INTEGER PRIMARY KEY, msg_id TEXT NOT NULL, note TEXT NOT NULL)"},
	}
	for _, s := range setup {
		if _, err := s.db.ExecContext(ctx, s.stmt); err != nil {
			d.close()
			return nil, fmt.Errorf("demo: set up: %w", err)
		}
	}
	return d, nil
}

func openDemoDB(ctx context.Context, path string) (*sql.DB, *outboxsqlite.Driver, error) {
	db, err := outboxsqlite.Open(path)
	if err != nil {
		return nil, nil, err
	}
	drv, err := outboxsqlite.New(db, outbox.Tables{})
	if err == nil {
		err = drv.Migrate(ctx)
	}
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("demo: %s: %w", path, err)
	}
	return db, drv, nil
}

func (d *demo) close() {
	d.bankDB.Close()
	d.pointsDB.Close()
}

// transferred is the event's payload: the complete fact, so that the
// consumer needs nothing from the bank's database.
type transferred struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Amount int64  `json:"amount"`
}

// transfer debits, credits and writes the message in one local transaction.
func (d *demo) transfer(ctx context.Context, from, to string, amount int64, msgID string) error {
	w, err := outbox.NewWriter(d.bank, outbox.WriterConfig{})
	if err != nil {
		return err
	}
	payload, _ := json.Marshal(transferred{From: from, To: to, Amount: amount})
	return d.bank.RunInTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var balance int64
		if err := tx.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE name = ?", from).Scan(&balance); err != nil {
			return err
		}
		if balance < amount {
			return errors.New("insufficient funds")
		}
		if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - ? WHERE name = ?", amount, from); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + ? WHERE name = ?", amount, to); err != nil {
			return err
		}
		return w.Write(ctx, tx, outbox.Message{MsgID: msgID, Topic: "account.transferred", Key: from, Payload: payload})
	})
}

func (d *demo) run(ctx context.Context, out io.Writer) error {
	t := d.text
	say := func(key string, args ...any) { fmt.Fprintf(out, t[key]+"\n", args...) }

	if err := d.transfer(ctx, "alice", "bob", 100, "m-1"); err != nil {
		return fmt.Errorf("demo: transfer: %w", err)
	}
	say("committed")
	if err := d.show(ctx, out); err != nil {
		return err
	}

	// The broker: an in-process queue behind a publisher that times out twice.
	var mu sync.Mutex
	var queue []outbox.Message
	failLeft := 2
	pub := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if failLeft > 0 {
			failLeft--
			return errors.New(t["timeout"])
		}
		queue = append(queue, m)
		return nil
	})
	if err := d.relayRounds(ctx, out, pub); err != nil {
		return err
	}

	fmt.Fprintln(out)
	say("consume")
	inbox := outbox.NewInbox(d.points)
	for _, m := range queue {
		for range 2 { // at-least-once: the broker delivers it twice
			var ev transferred
			if err := json.Unmarshal(m.Payload, &ev); err != nil {
				return fmt.Errorf("demo: payload: %w", err)
			}
			note := fmt.Sprintf(t["note"], ev.From, ev.To, ev.Amount)
			applied, err := inbox.Process(ctx, "points", m.MsgID, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO notes (msg_id, note) VALUES (?, ?)", m.MsgID, note)
				return err
			})
			if err != nil {
				return fmt.Errorf("demo: consume: %w", err)
			}
			if applied {
				say("effect", m.MsgID, note)
			} else {
				say("duplicate", m.MsgID)
			}
		}
	}
	fmt.Fprintln(out)
	return d.show(ctx, out)
}

// show prints the accounts, the outbox rows and what the consumer applied,
// read back from the two databases.
func (d *demo) show(ctx context.Context, out io.Writer) error {
	t := d.text
	var alice, bob int64
	err := d.bankDB.QueryRowContext(ctx, "SELECT (SELECT balance FROM accounts WHERE name = 'alice'), (SELECT balance FROM accounts WHERE name = 'bob')").Scan(&alice, &bob)
	if err != nil {
		return fmt.Errorf("demo: read accounts: %w", err)
	}
	fmt.Fprintf(out, t["accounts"]+"\n", alice, bob)
	var msgs []outbox.Message
	for _, st := range []outbox.Status{outbox.StatusNew, outbox.StatusSent, outbox.StatusDead} {
		page, err := d.bank.ListMessages(ctx, outbox.ListFilter{Status: st})
		if err != nil {
			return err
		}
		msgs = append(msgs, page...)
	}
	for _, m := range msgs {
		fmt.Fprintf(out, t["message"]+"\n", m.MsgID, m.Status, m.Retries)
	}
	rows, err := d.pointsDB.QueryContext(ctx, "SELECT note FROM notes ORDER BY id")
	if err != nil {
		return err
	}
	defer rows.Close()
	var notes []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return err
		}
		notes = append(notes, n)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	fmt.Fprintf(out, t["applied"]+"\n", strings.Join(notes, " "))
	return nil
}

// relayRounds prints the relay narrative: four rounds of the real relay
// over pub, whose first two attempts fail.
func (d *demo) relayRounds(ctx context.Context, out io.Writer, pub outbox.Publisher) error {
	say := func(key string, args ...any) { fmt.Fprintf(out, d.text[key]+"\n", args...) }
	const maxRetries = 3
	relay, err := outbox.NewRelay(d.bank, pub, outbox.RelayConfig{
		BatchSize: 10, MaxRetries: maxRetries, RetryBase: time.Millisecond, RetryMax: time.Millisecond, RetryBudget: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	say("start")
	for round := 1; round <= 4; round++ {
		say("round", round)
		rep, err := relay.RunOnce(ctx)
		if err != nil {
			return fmt.Errorf("demo: relay: %w", err)
		}
		for _, r := range rep.Results {
			switch r.Outcome.Kind {
			case outbox.OutcomeSent:
				say("sent", r.Message.MsgID)
			case outbox.OutcomeRetry:
				say("failed", r.Message.MsgID, r.Message.Retries+1, r.Err)
			case outbox.OutcomeDead:
				say("dead", r.Message.MsgID, maxRetries)
			}
		}
		if rep.Sent == 0 {
			say("nothing")
		}
		// Let the (one millisecond) backoff pass; SQLite keeps milliseconds.
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}
