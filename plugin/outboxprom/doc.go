// Package outboxprom exports an outbox relay's work and the outbox table's
// backlog as Prometheus metrics.
//
// A [Metrics] is both an [outbox.BatchHook], which counts what every batch
// did, and a [prometheus.Collector], which the application registers on its
// own registry:
//
//	m, err := outboxprom.New(outboxprom.Backlog(drv)) // drv: an outbox driver
//	if err != nil { ... }
//	prometheus.MustRegister(m)
//	relay, err := outbox.NewRelay(drv, pub, outbox.RelayConfig{Hooks: []outbox.Hook{m}})
//
// The relay's series, counted by the hook after every batch that claimed at
// least one message:
//
//	outbox_relay_messages_total{topic, outcome}     counter: outcome is sent, retried, dead or released
//	outbox_relay_batches_total                      counter
//	outbox_relay_batch_duration_seconds             histogram: claim to finished mark
//	outbox_relay_stage_duration_seconds{stage}      histogram: stage is claim, publish or mark
//	outbox_relay_last_batch_timestamp_seconds       gauge: when the last batch finished (unix time)
//
// Passed to an [outbox.Cleaner] as well ([outbox.CleanerConfig].Hooks), it
// counts the cleaner's rounds ([outbox.CleanupHook]); these series appear
// once a cleaner has reported:
//
//	outbox_cleanup_deleted_rows_total{rows}          counter: rows is sent (outbox) or consumed (inbox)
//	outbox_cleanup_rounds_total{result}              counter: result is ok or failed
//	outbox_cleanup_last_success_timestamp_seconds    gauge: when a round last finished without an error
//
// With [Backlog], each scrape also reads the outbox table's backlog (at most
// once per [BacklogInterval], each read bounded by [BacklogTimeout]):
//
//	outbox_pending_messages                         gauge: NEW messages, due or waiting for a retry
//	outbox_pending_oldest_age_seconds               gauge: age of the oldest NEW message (0 when none)
//	outbox_dead_messages                            gauge: DEAD messages, where the store counts them through an index
//	outbox_backlog_up                               gauge: 1 when the last read succeeded, else 0
//	outbox_backlog_read_duration_seconds            gauge: how long the last read took
//	outbox_backlog_read_failures_total              counter
//
// The backlog comes from [outboxdriver.BacklogReader], never from [outboxdriver.Store.Stats]:
// Stats counts every row, SENT history included, which on PostgreSQL (whose
// claim keeps status out of every index) reads the whole table. The
// backlog read walks only the NEW and DEAD rows through indexes, so its cost grows
// with the backlog, not with the table (on PostgreSQL, with the rows past
// the relays' low-water mark, the walk their rescans make: a running relay
// keeps the mark near the newest row). A slow or failing database never
// holds up or fails a scrape: after BacklogTimeout the scrape answers
// outbox_backlog_up 0 and the relay's series as usual.
//
// # Alerts
//
// The relay is behind, stuck or down (whichever it is, the oldest message
// waits): outbox_pending_oldest_age_seconds > 300. Messages went DEAD:
// increase(outbox_relay_messages_total{outcome="dead"}[15m]) > 0, or, where
// they are counted, outbox_dead_messages > 0. The backlog cannot be read:
// outbox_backlog_up == 0. A relay that has work but finishes no batch:
// time() - outbox_relay_last_batch_timestamp_seconds > 120 and
// outbox_pending_messages > 0 (a relay that claims nothing, because there is
// nothing to claim, reports no batch). The cleanup fails:
// increase(outbox_cleanup_rounds_total{result="failed"}[1h]) > 0.
//
// # Topics
//
// The topic label holds each message's topic. Topics are usually few; to keep
// a mistake (a topic per order id) from creating a series per message, only
// the first [MaxTopics] topics seen get a label value of their own, and the
// messages of any further topic are counted under topic="_other"
// ([OtherTopic]). The other labels (outcome, stage, result) take fixed
// values. A topic that quotes a URL has that URL's password, token and
// secret query values masked in its label, so that a scrape serves no
// secret.
//
// Several relays, in one process or many, may share one Metrics. Two outbox
// tables in one process need two, registered with different constant labels
// (prometheus.WrapRegistererWith).
package outboxprom
