// Package outboxnats publishes outbox messages to NATS JetStream and consumes
// them in consumer groups: the NATS adapter of the outbox relay (DESIGN §4),
// built on github.com/nats-io/nats.go and its jetstream package. It works
// with nats-server 2.9 and later.
//
// # URL
//
//	nats://host:4222[,nats://host2:4222][?param=value&...]
//
// Several servers are separated by commas; tls:// instead of nats:// asks for
// TLS. Credentials go before a host: nats://user:password@host:4222, or a
// token as nats://token@host:4222; errors never show them. Parameters (a
// config field that is set wins over its parameter; an unknown parameter is
// an error; each side ignores the other side's parameters, so one URL can
// serve the relay and the consumers):
//
//	subject=outbox.{topic}  subject template; {topic} must be its last token(s)
//	stream=OUTBOX           the stream; created when missing over the
//	                        template's prefix followed by ">" ("outbox.>")
//	duplicates=2m           the stream's duplicate window (when creating it)
//	max_age=0               how long the stream keeps messages (when creating
//	                        it); 0, the default, keeps them for good
//	storage=file            file or memory (when creating the stream)
//	timeout=5s              connect, API calls, each PubAck and each ack
//	creds=/path/user.creds  a NATS credentials file
//
// Subscriber only:
//
//	topic=order.paid              consume one topic (default: every topic)
//	max_deliveries=5              failed deliveries before the dead-letter path,
//	                              together with dead_letter_after
//	dead=outbox_dead.{group}      dead-letter subject template; {group} last
//	dead_stream=OUTBOX_DEAD       the dead-letter stream, created when missing
//	ack_wait=30s                  redelivery after an ack that never came
//	redelivery_delay=1s           wait after a handler error, doubling per delivery
//	redelivery_delay_max=1m       the longest such wait
//	dead_letter_after=10m         how long a message must fail before the dead-letter path
//	deliver=all                   all or new: where a new group starts
//	prefetch=16                   messages fetched ahead of the handler
//
// The dead-letter default is outbox_dead.{group}, not outbox.dead.{group}: a
// subject under "outbox.>" would belong to the OUTBOX stream, and NATS does
// not let two streams hold overlapping subjects.
//
// # TLS and authentication
//
// tls_ca names a PEM file of the CAs that sign the server's certificate
// (default: the system's roots), tls_cert and tls_key a client certificate
// and its key, tls_server_name the name checked in the certificate
// (default: the URL's host). A client certificate that has expired is
// refused at once with ErrConfig; a server's certificate that has expired or that
// another CA signed fails the handshake with an error that names the cause.
// Any of them, or a tls:// server, makes TLS a requirement: a server that
// does not offer it is refused, never spoken to in plain text.
//
// Logging in: user:password@ or token@ before a host; creds=/path/user.creds
// (a JWT and nkey seed); nkey=/path/user.nk (a file holding a user's nkey
// seed, for servers that list users by nkey). Seeds and passwords never
// appear in errors or logs. PublisherConfig.Conn and SubscriberConfig.Conn
// take a *nats.Conn of your own. ParseURL turns a URL into a
// PublisherConfig whose fields then win.
//
// # On the wire
//
// Each row is one NATS message on subject prefix+topic (outbox.order.paid),
// in the binary mode of the CloudEvents NATS binding: the payload is the body,
// byte for byte, and the attributes are headers named "ce-" plus the
// attribute's name:
//
//	ce-specversion:  1.0
//	ce-id:           msg_id
//	ce-type:         topic
//	ce-source:       PublisherConfig.Source ("/outbox")
//	ce-time:         created_at, RFC 3339 in UTC (when known)
//	ce-partitionkey: msg_key (when set)
//	ce-<name>:       one per row header
//	content-type:    application/json
//	Nats-Msg-Id:     msg_id
//
// Header values are percent-encoded as in the CloudEvents HTTP binding
// (bytes outside printable ASCII, space, '"' and '%'), because NATS headers
// are ASCII lines that cannot carry CR or LF; ids, topics and times made of
// printable ASCII pass unchanged.
//
// # What counts as an ack
//
// A message is acknowledged when the stream's PubAck comes back: the server
// has appended it to the stream (with file storage, written to the store
// file; the server syncs to disk on its own interval, two minutes by default).
// A PubAck with Duplicate=true, for a msg_id already stored within the
// duplicate window, is an ack too. Publish sends the whole batch with
// PublishMsgAsync and then waits for each message's own PubAck future.
//
// Errors that satisfy outbox.IsUnavailable leave the row untouched and pause
// the relay: no connection (the client reconnects by itself, forever, and a
// publish during a reconnect fails at once rather than waiting in a buffer),
// no PubAck within timeout, no stream answering on the subject (a removed
// stream cannot be told from JetStream restarting), a 5xx answer from
// JetStream, the caller's ctx ending. A message NATS cannot carry is not
// sent, and its error satisfies outbox.IsUndeliverable (the relay makes it
// DEAD at once): a topic that makes an invalid subject (whitespace, a control
// character, empty token, wildcard token) or a subject over 3936 bytes (the
// server's max_control_line of 4096, less the rest of the line; the server
// would close the connection), a message over the server's max_payload. A
// refusal spends one of the row's retries: a 4xx answer from the stream
// (over its max_msg_size).
//
// Header values (ce-* and Nats-Msg-Id) are percent-encoded as in the
// CloudEvents HTTP binding, so any UTF-8 text, CR and LF included, travels
// and comes back as it left; header names are "ce-" and the attribute name.
//
// # Order and duplicates
//
// A batch is sent in order on one connection, and the stream stores it in
// that order. One subscriber handles one message at a time in stream order,
// so messages of a key arrive in order while no delivery fails; a handler
// error sends that message back for a later delivery, behind its successors.
// A batch with several messages of one key goes in waves
// (outbox.PublishWaves): a key's next message is sent once its previous one
// has its PubAck. When a keyed message fails, before it is sent or by its
// PubAck, the later messages of its key in the batch get outbox.ErrHeldBack.
//
// The stream drops a second publish of a msg_id within its duplicate window
// (duplicates=, two minutes by default); the relay's re-publish after a crash
// between publish and mark is usually within it. Deliveries are still at
// least once (an ack lost in a broker restart means a redelivery), so
// consumers dedupe with the inbox.
//
// # Consumer groups and the dead-letter path
//
// A group is a durable pull consumer on the stream, named by ConsumerName,
// with AckExplicit and the topic's filter subject; NewSubscriber creates it,
// so that messages published afterwards reach the group before Run starts.
// Subscribers of one group, in any process, share the consumer and split the
// messages. Run acks a message with a confirmed ack (DoubleAck: the server
// answers) after the handler returned nil, and before it takes the next
// message, so the inbox transaction commits before the ack. A handler error
// naks the message with a delay (redelivery_delay, doubling up to
// redelivery_delay_max). A failure that is at least the max_deliveries-th,
// once the message has been failing for dead_letter_after (measured by the
// delivery count: the n-th delivery comes at least the sum of the first n-1
// delays after the first), an outbox.Permanent error, or a message that is
// not an outbox event is published to the group's dead-letter subject with
// its headers and body plus Outbox-Dead-Reason, Outbox-Dead-Group,
// Outbox-Dead-Subject and Outbox-Dead-Sequence, and the original is
// terminated once the dead letter's PubAck arrived. The consumer's own
// MaxDeliver is unlimited and the subscriber counts deliveries itself, so that
// a message whose dead letter could not be stored is delivered again (and
// dead-lettered then) instead of being stranded.
//
// A handler error for which outbox.IsUnavailable holds (Inbox.Handler's
// when its database is down) is not a failed delivery: Run keeps the
// message in hand and in progress, pauses with the same growing delay, and
// hands it to the handler again; the broker's delivery count does not move.
// The messages fetched ahead (Prefetch) are taken out of the subscription
// and kept in progress too, and handled in order once the outage is over;
// only a message the broker was still sending when the pause began is
// delivered again after AckWait, one delivery counted.
//
// # A consumer
//
//	sub, err := outboxnats.NewSubscriber(ctx, outboxnats.SubscriberConfig{
//		URL:   "nats://127.0.0.1:4222?topic=order.paid",
//		Group: "billing",
//	})
//	if err != nil {
//		return err
//	}
//	defer sub.Close()
//	return sub.Run(ctx, inbox.Handler("billing", func(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
//		_, err := tx.ExecContext(ctx, `UPDATE invoices SET paid = true WHERE order_id = $1`, m.Key)
//		return err
//	}))
//
// Run returns nil when ctx ends, after the handler in hand finished and its
// message was acked; messages fetched ahead go back to the broker.
package outboxnats
