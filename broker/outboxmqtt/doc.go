// Package outboxmqtt publishes outbox messages to an MQTT 5 broker and
// consumes them in consumer groups, with the Eclipse Paho client
// (github.com/eclipse/paho.golang). It is tested against mosquitto 2.0.
//
// # URL
//
//	mqtt://[user:password@]host[:port][?param=value&...]     port 1883 by default
//	mqtts://[user:password@]host[:port][?param=value&...]    TLS, port 8883 by default
//
// Query parameters (a config field that is set wins over its parameter; an
// unknown parameter is an error):
//
//	topic=outbox/{topic}    MQTT topic of a message; {topic} is the row's topic, inserted
//	                        unchanged (dots stay dots, a "/" starts a new topic level).
//	                        Publisher and subscriber must agree on it.
//	qos=1                   1 (the PUBACK is the ack) or 2 (the PUBCOMP is; only with
//	                        no_subscribers=ok, as the 0x10 answer is then not seen); 0 is
//	                        refused: it has no ack.
//	client_id=...           the publisher's client id; default outbox-relay-<8 random hex>.
//	window=20               messages in flight per Publish call, lowered to the broker's
//	                        Receive Maximum (mosquitto: max_inflight_messages, default 20).
//	no_subscribers=fail     what a PUBACK 0x10 "no matching subscribers" means: fail (a
//	                        refusal that spends a retry) or ok (counts as delivered).
//	source=/outbox          the CloudEvents source attribute.
//	connect_timeout=10s     wait for the first connection (NewPublisher, NewSubscriber).
//	ack_timeout=30s         wait for one acknowledgement, then outbox.Unavailable.
//	keepalive=30s           MQTT keep-alive.
//	consume=order.paid      subscriber: the row topic to consume (may be "+" or "#").
//	name=<host name>        subscriber: the member's name within its group.
//	max_deliveries=5        subscriber: handler calls before the dead-letter topic.
//	redelivery_delay=1s     subscriber: wait before a new call after a handler error, doubling.
//	redelivery_delay_max=1m subscriber: the longest such wait.
//	dead_letter_after=10m   subscriber: how long a message must fail before the dead-letter topic.
//	dead_topic=outbox/dead/{group}  subscriber: the dead-letter topic.
//	session_expiry=4294967295s subscriber: how long the broker keeps an absent member's
//	                        session; the default, MQTT 5's largest, means never
//
// # TLS and authentication
//
// mqtts:// connects with TLS;
// tls_ca names a PEM file of the CAs that sign the broker's certificate
// (default: the system's roots), tls_cert and tls_key a client certificate
// and its key, tls_server_name the name checked in the certificate
// (default: the URL's host). A client certificate that has expired is
// refused at once with ErrConfig; a broker's certificate that has expired or that
// another CA signed fails the handshake with an error that names the cause.
// The TLS parameters with mqtt:// are an error, never a plain-text
// connection. mqtt://user:password@host logs in with the MQTT user name and
// password. PublisherConfig.TLS and SubscriberConfig.TLS take a
// *tls.Config. ParseURL turns a URL into a PublisherConfig whose fields then
// win.
//
// # Your own client settings
//
// The adapter takes no *autopaho.ConnectionManager of the caller's: its
// acks, its persistent session and its subscription on every connection rest
// on the session state, clean start, session expiry and callbacks, which are
// fixed when a manager is made (a handler added later with
// AddOnPublishReceived does not survive a reconnection), and the subscriber
// makes a manager per Run. Instead PublisherConfig.ClientConfig and
// SubscriberConfig.ClientConfig adjust the autopaho.ClientConfig the adapter
// builds, before each connection manager is made:
//
//	cfg := outboxmqtt.PublisherConfig{
//		URL: "mqtts://broker.example.com",
//		ClientConfig: func(c *autopaho.ClientConfig) {
//			c.ServerUrls = append(c.ServerUrls, standby) // fail over
//			c.ConnectPacketBuilder = addAuthProperties
//		},
//	}
//
// The hook may change the servers, TLS, the login, the dialling, keep-alive,
// the CONNECT packet and logging; the adapter puts back its client id,
// session state, clean start, session expiry and packet timeout, and runs
// the hook's OnConnectionUp and OnConnectError after its own.
//
// # On the wire
//
// The CloudEvents MQTT binding, binary mode, MQTT 5: the payload is the
// row's payload, byte for byte; the Content Type property is
// application/json; every other attribute is a user property named as the
// attribute: specversion, id (msg_id), source, type (topic), time
// (created_at, RFC 3339), partitionkey (msg_key, when set) and one per row
// header. Consumers with their own MQTT client can use Decode.
//
// # What an ack means
//
// A message is delivered (the relay marks it SENT) when the broker's PUBACK
// (QoS 2: PUBCOMP) arrives with a success reason code. For mosquitto that
// means the message is in the broker's memory and queued for every matching
// subscription, including the persistent sessions of absent group members.
// It is not on disk: mosquitto writes its persistence file every
// autosave_interval (30 minutes by default) and on a clean shutdown, so a
// crash of the broker loses what it acknowledged since. A reason code of
// 0x80 or above is a refusal of that message (a *PublishError, which spends
// one of its retries). A message that breaks a rule of MQTT is not sent at
// all, because the broker would close the connection, and its error
// satisfies outbox.IsUndeliverable (the relay makes it DEAD at once): a topic
// that is not a valid MQTT topic name (a "+" or "#" in the row's topic), a
// topic or attribute value with a control character (U+0000 to U+001F, tab
// and line breaks included, U+007F to U+009F) or a Unicode noncharacter,
// which mosquitto refuses as "Malformed UTF-8", a string over 65,535 bytes,
// a message over the broker's Maximum Packet Size. Values travel as raw
// UTF-8 user properties, not percent-encoded. A lost connection, no ack within ack_timeout, and the caller's
// context ending are outbox.Unavailable: the relay pauses and retries
// without spending the message's budget.
//
// IMPORTANT: an MQTT broker keeps nothing for a topic nobody subscribes to.
// mosquitto acknowledges such a message with reason 0x10 "no matching
// subscribers" and drops it. By default (no_subscribers=fail) that is a
// refusal: the row stays NEW, is retried, and reaches DEAD at the retry
// limit, where `outbox dead retry` sends it again. Create each consumer group
// (NewSubscriber) before the relay publishes its topic. With
// no_subscribers=ok such messages are marked SENT and are lost.
//
// IMPORTANT: mosquitto queues at most max_queued_messages (default 1000)
// messages per client beyond those in flight, and silently drops the rest,
// after having acknowledged them to the publisher. A group member that falls
// behind by more than that, or is away while more than that is published for
// it, loses messages. Raise max_queued_messages (0 = no limit, bounded by
// max_queued_bytes) on a broker that carries outbox traffic.
//
// IMPORTANT: mosquitto 2.0 (seen with 2.0.11) keeps sessions and their
// queued messages across a restart (with persistence on), but not their
// shared subscriptions. Run subscribes again on every connection, so a
// running member is back within its reconnection delay; until then the
// broker answers 0x10, which the publisher's default turns into a retry.
// But a group none of whose members is connected when the broker restarts
// receives nothing until one of them runs again, and if another group
// still matches the topic the broker acks those messages: that group loses
// them. Keep consumers running across broker restarts.
//
// # Ordering and duplicates
//
// The publisher sends the messages of one key one after another, each after
// the previous one's ack, and holds back (outbox.ErrHeldBack) the rest of a
// key after a failure; messages without a key, and different keys, are in
// flight together. mosquitto delivers the messages of a topic from one
// connection in the order it received them, and a Subscriber handles its
// messages one at a time in arrival order, retrying a failed one before
// taking the next, so one member sees each key in order. A group with
// several members splits a key between them (mosquitto's shared
// subscriptions go round robin), so order holds per member only.
//
// There is no deduplication: MQTT has none for QoS 1, and a relay that
// publishes a batch again after a crash sends the copies. Consumers
// deduplicate by msg_id (the id attribute): build the handler with
// Inbox.Handler.
//
// # Throughput
//
// paho.golang's Publish blocks until the ack and has no asynchronous form
// that reports it, so a Publish call runs up to window publishes in
// goroutines of their own. The connection reads through a buffer, writes
// each packet with one system call, and on Linux sets TCP_QUICKACK after
// every read: mosquitto without set_tcp_nodelay (its default) holds each
// PUBACK back with Nagle's algorithm until its previous segment is
// acknowledged, and the client's delayed ACKs (up to 40ms) then stalled the
// end of every windowed batch. Measured on this 2-core machine, batches of
// 500 messages of 200 bytes, mosquitto 2.0.11 on 127.0.0.1: window 20 gave
// about 20,000 messages/s with or without set_tcp_nodelay, window 1 about
// 8,000; before these changes window 20 gave 4,000 to 5,000 without
// set_tcp_nodelay, less than one at a time. window=1 publishes one message
// at a time. BenchmarkPublish measures it:
//
//	go test -run '^$' -bench Publish -benchtime 20000x
//
// # Consumer groups
//
// A group is an MQTT 5 shared subscription, "$share/<group>/<filter>", held
// by each member's persistent session (Clean Start 0, Session Expiry
// session_expiry) under the client id "outbox-<group>-<name>". NewSubscriber
// makes the session, so messages published afterwards are kept for the
// group even before Run. mosquitto hands each message of a shared
// subscription to the next member in turn, whether that member is connected
// or not: an absent member's share waits in its session until a subscriber
// with the same group and name runs again. So give each member a stable
// name, and call Subscriber.Leave when removing a member for good, or its
// share is stranded until the session expires.
//
// # Acknowledgement, redelivery and the dead-letter topic
//
// Run sends a message's PUBACK only after the handler returned nil. MQTT
// has no negative acknowledgement and redelivers only after a reconnection,
// so on a handler error Run calls the handler again itself, after
// redelivery_delay (doubling, at most redelivery_delay_max). It gives up at a
// failed call that is at least the max_deliveries-th once the message has
// been failing for dead_letter_after: with the defaults (1s doubling to 1m,
// 5 calls, 10m) a message that fails every time is dead-lettered at its 16th
// call, about 10 minutes after the first, so a database outage of several
// minutes does not empty the member into the dead-letter topic. A handler
// error for which outbox.IsUnavailable holds (Inbox.Handler's, when its
// database is down) pauses the member with the same growing waits and is
// not counted. Meanwhile the member's later messages wait (their PUBACKs
// must follow in order).
//
// After the last call, or at once for an error marked with outbox.Permanent
// or a message that is not an outbox event, Run publishes the message with QoS 1
// to the dead-letter topic (outbox/dead/<group>): the same payload and
// properties plus the attributes deadreason, deadgroup, deaddeliveries and
// deadtopic; it acks the original only after the broker acked the dead
// letter. The dead-letter topic needs a subscriber with a persistent
// session, for example
//
//	mosquitto_sub -V 5 -c -i outbox-dead -x 86400 -q 1 -t 'outbox/dead/#'
//
// without one, mosquitto answers 0x10, and Run stops with an error rather
// than let the message be dropped (it stays unacked and comes back).
//
// # Consumer example
//
//	sub, err := outboxmqtt.NewSubscriber(ctx, outboxmqtt.SubscriberConfig{
//		URL:   "mqtt://localhost:1883",
//		Group: "billing",
//		Name:  os.Getenv("POD_NAME"),
//		Topic: "order.paid",
//	})
//	if err != nil {
//		return err
//	}
//	defer sub.Close()
//	return sub.Run(ctx, inbox.Handler("billing", func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
//		_, err := tx.Exec(ctx, "UPDATE invoices SET paid = true WHERE order_id = $1", m.Key)
//		return err
//	}))
package outboxmqtt
