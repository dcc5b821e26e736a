// Program consumer is built by tools/modcheck.sh outside the repository, from
// a file-based module proxy, with no replace and no workspace: it proves that
// the core, a driver and a broker adapter can be fetched and used as a user
// would. It writes one message in a pgx transaction, relays it to NATS
// JetStream, and reads it back from the stream.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxnats"
	"github.com/outbox-go/outbox/driver/outboxpgx"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, natsURL := os.Getenv("MODCHECK_PG"), os.Getenv("MODCHECK_NATS")
	name := fmt.Sprintf("modcheck_%d", os.Getpid())

	// A schema of its own, so the check shares no table with other tests.
	admin, err := pgx.Connect(ctx, pg)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return err
	}
	defer admin.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE")

	cfg, err := pgxpool.ParseConfig(pg)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	drv, err := outboxpgx.New(pool, outbox.Tables{})
	if err != nil {
		return err
	}
	if err := drv.Migrate(ctx); err != nil {
		return err
	}
	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
	if err != nil {
		return err
	}
	msg := outbox.Message{MsgID: name + ":1", Topic: "order.paid", Payload: json.RawMessage(`{"order":42}`)}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msg) }); err != nil {
		return err
	}

	stream := "MODCHECK_" + fmt.Sprint(os.Getpid())
	pub, err := outboxnats.NewPublisher(ctx, outboxnats.PublisherConfig{
		URL: natsURL, Stream: stream, Subject: name + ".{topic}", MemoryStorage: true,
	})
	if err != nil {
		return err
	}
	defer pub.Close()
	relay, err := outbox.NewRelay(drv, pub, outbox.RelayConfig{})
	if err != nil {
		return err
	}
	rep, err := relay.RunOnce(ctx)
	if err != nil {
		return err
	}
	if rep.Sent != 1 {
		return fmt.Errorf("relay sent %d messages, want 1 (%+v)", rep.Sent, rep)
	}
	return readBack(ctx, natsURL, stream, name+".order.paid", msg.MsgID)
}

// readBack checks that the stream holds the relayed message, and removes the
// stream.
func readBack(ctx context.Context, url, stream, subject, msgID string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	defer js.DeleteStream(context.Background(), stream)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	got, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return fmt.Errorf("reading %s back: %w", subject, err)
	}
	if id := got.Header.Get("Nats-Msg-Id"); id != msgID {
		return errors.New("stream holds msg id " + id + ", want " + msgID)
	}
	fmt.Printf("consumer: wrote %s in PostgreSQL, relayed it to NATS stream %s, read it back\n", msgID, stream)
	return nil
}
