package outboxprom_test

import (
	"context"
	"fmt"
	"log"
	"net/http"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
	"github.com/outbox-go/outbox/plugin/outboxprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// A relay calls the hook after every batch; here one batch is handed to it
// directly, and the registry shows what it counted.
func Example() {
	m, err := outboxprom.New()
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	result := func(topic string, kind outbox.OutcomeKind) outbox.MessageResult {
		return outbox.MessageResult{Message: outbox.Message{Topic: topic}, Outcome: outbox.Outcome{Kind: kind}}
	}
	m.OnBatch(context.Background(), outbox.BatchReport{Results: []outbox.MessageResult{
		result("order.paid", outbox.OutcomeSent),
		result("order.paid", outbox.OutcomeSent),
		result("order.paid", outbox.OutcomeDead),
	}})

	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			if mf.GetName() == "outbox_relay_messages_total" && s.GetCounter().GetValue() > 0 {
				fmt.Print(mf.GetName())
				for _, l := range s.GetLabel() {
					fmt.Printf(" %s=%s", l.GetName(), l.GetValue())
				}
				fmt.Println(":", s.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// outbox_relay_messages_total outcome=dead topic=order.paid: 1
	// outbox_relay_messages_total outcome=sent topic=order.paid: 2
}

// A relay with its metrics, and the backlog of its table, on :9090/metrics.
func Example_relay() {
	ctx := context.Background()
	// drv is an outbox driver (outboxpgx.New, outboxmysql.New,
	// outboxsqlite.New): every one is a BacklogReader too.
	var drv interface {
		outboxdriver.Store
		outboxdriver.BacklogReader
	}
	var pub outbox.Publisher // a broker adapter: outboxnats, outboxkafka, ...

	m, err := outboxprom.New(outboxprom.Backlog(drv))
	if err != nil {
		log.Fatal(err)
	}
	prometheus.MustRegister(m)
	go func() { log.Fatal(http.ListenAndServe(":9090", promhttp.Handler())) }()

	relay, err := outbox.NewRelay(drv, pub, outbox.RelayConfig{Hooks: []outbox.Hook{m}})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(relay.Run(ctx))
}
