// Package outboxamqp publishes outbox messages to RabbitMQ and consumes them,
// over AMQP 0-9-1 with github.com/rabbitmq/amqp091-go. The Publisher is the
// relay's outbox.Publisher (`outbox relay --broker amqp://...`); the
// Subscriber hands each message to an outbox.Handler, built with the inbox
// (Inbox.Handler) so that each message takes effect once.
//
// # URL
//
//	amqp://user:password@host:5672/vhost?exchange=outbox&routing_key={topic}
//	amqps://user:password@host:5671/vhost?cacertfile=/etc/ca.pem
//
// The vhost is the path ("/" when empty; %2F for a vhost named "/"). Reserved
// characters in the user or password are percent-encoded. The password is
// never printed: errors and logs show the URL with it masked. A config field
// that is set wins over its query parameter; an unknown parameter is an error,
// while a parameter of the other role (a subscriber's queue in the relay's
// URL) is ignored, so that producers and consumers can share one URL.
//
// Parameters of the publisher and the subscriber:
//
//	exchange           the exchange messages go to and queues are bound to (default "outbox")
//	exchange_type      topic, direct, fanout or headers, used to declare it (default topic)
//	declare            false: only check that the exchange exists, for accounts that
//	                   may not declare it (default true: declare it durable)
//	connection_timeout milliseconds for TCP, TLS and AMQP handshakes together (default 10000)
//	heartbeat          seconds between heartbeats (default 10)
//	channel_max        the most channels on the connection (default: the broker's)
//	auth_mechanism     plain, amqplain or external (default plain)
//	certfile, keyfile  a client certificate for amqps (mutual TLS)
//	cacertfile         the CA that signed the broker's certificate (default: the system's roots)
//	server_name_indication  the TLS server name (default: the host)
//
// Parameters of the publisher only:
//
//	routing_key        the routing key, a template in which {topic} is the row's topic
//	                   (default "{topic}")
//	source             the CloudEvents source attribute (default "/outbox")
//	timeout            bound on one Publish call, a Go duration (default 30s)
//	max_message_bytes  the largest body sent; larger ones are refused unsent
//	                   (default 134217728, RabbitMQ's max_message_size)
//
// Parameters of the subscriber only:
//
//	queue              the group's queue (default: the group's name)
//	binding_key        the key that binds the queue to the exchange (default "#": every topic)
//	dead_letter_queue  where failed messages go; {queue} is the queue's name (default "{queue}.dead")
//	max_deliveries     failed deliveries of a message before it is dead-lettered,
//	                   together with dead_letter_after (default 5)
//	redelivery_delay   pause before a failed message is handed to the handler again,
//	                   doubling (default 1s)
//	redelivery_delay_max  the longest such pause (default 1m)
//	dead_letter_after  how long a message must fail before it is dead-lettered
//	                   (default 10m)
//	prefetch           unacknowledged messages the broker sends at once (default 1)
//	reconnect_delay    the longest pause between reconnection attempts (default 5s)
//
// # TLS and authentication
//
// amqps:// connects with TLS;
// tls_ca names a PEM file of the CAs that sign the broker's certificate
// (default: the system's roots), tls_cert and tls_key a client certificate
// and its key, tls_server_name the name checked in the certificate
// (default: the URL's host). A client certificate that has expired is
// refused at once with ErrConfig; a broker's certificate that has expired or that
// another CA signed fails the handshake with an error that names the cause.
// RabbitMQ's own names of these parameters, cacertfile, certfile, keyfile
// and server_name_indication, mean the same. The TLS parameters with
// amqp:// are an error, never a plain-text connection. The user and
// password log in with PLAIN; auth_mechanism=external logs in with the
// client certificate. PublisherConfig.TLS takes a *tls.Config. ParseURL
// turns a URL into a PublisherConfig whose fields then win.
//
// # Your own connection
//
// An amqp091-go connection does not reconnect, and the publisher and the
// subscriber open a new one after each loss, so they take a dial function
// rather than a connection: PublisherConfig.Dial and SubscriberConfig.Dial
// are called for every connection, with the caller's amqp.Config (TLS, SASL,
// heartbeats, client properties), and the URL then holds only the query
// parameters, if any:
//
//	cfg := outboxamqp.PublisherConfig{
//		URL: "?exchange=orders",
//		Dial: func(ctx context.Context) (*amqp.Connection, error) {
//			return amqp.DialConfig(url, amqp.Config{SASL: mechanisms, Heartbeat: 5 * time.Second})
//		},
//	}
//
// The adapter owns and closes each connection Dial returns.
//
// # On the wire
//
// A message follows the CloudEvents AMQP binding in binary content mode. The
// body is the payload, with content-type application/json (the binding's
// place for datacontenttype); message-id is the msg_id, type the topic,
// timestamp created_at (whole seconds), delivery mode 2 (persistent). The
// attributes are headers (the AMQP application properties) whose names are
// prefixed "cloudEvents_", the spelling the binding prefers because JMS
// accepts it (the subscriber also reads "cloudEvents:"):
//
//	cloudEvents_specversion  1.0
//	cloudEvents_id           msg_id
//	cloudEvents_source       PublisherConfig.Source
//	cloudEvents_type         topic
//	cloudEvents_time         created_at, RFC 3339 with fractions (a string: an AMQP
//	                         0-9-1 timestamp has whole seconds only)
//	cloudEvents_partitionkey msg_key, when set
//	cloudEvents_<name>       one per row header
//
// # What counts as an ack
//
// Publish uses publisher confirms and the mandatory flag. A message is acked
// (nil error; the relay marks it SENT) when RabbitMQ confirmed it and did not
// return it: the broker confirms a persistent message routed to a durable
// queue once the queue has written it to disk (a quorum queue: once a
// majority of its replicas have). The errors:
//
//   - *ReturnedError: the message was returned (basic.return, 312 NO_ROUTE)
//     because no queue is bound to receive its routing key. RabbitMQ sends the
//     return and then an ack; the publisher matches returns to messages by
//     message-id. Start the groups' subscribers (which declare and bind their
//     queues) before the relay publishes. A refusal: it spends a retry.
//   - ErrNacked: the broker nacked the message (a queue in reject-publish
//     overflow, an internal error). A refusal.
//   - ErrTooLarge: the body is over MaxMessageBytes; it was not sent. It
//     satisfies outbox.IsUndeliverable: the relay makes the message DEAD at
//     once. A later message of the same key in the batch is not sent
//     either: it gets outbox.ErrHeldBack.
//   - *cloudevents.LimitError (outbox.IsUndeliverable): the message breaks a
//     limit of AMQP 0-9-1 and was not sent, since the broker would close the
//     connection: a msg_id (message-id), topic (type) or routing key over
//     255 bytes, a header name over 255 bytes with its "cloudEvents_"
//     prefix, or a content header (the properties with every header) larger
//     than the connection's negotiated frame_max less 8 bytes (RabbitMQ's
//     default frame_max is 131072). Rows inserted by plain SQL can hold
//     such messages; the Writer refuses them. A later message of the same
//     key is held back.
//   - outbox.Unavailable: the broker could not be reached, the connection or
//     channel was lost before the confirm, the context ended, or Timeout
//     passed. The relay pauses and retries without spending the message's
//     retries. The publisher reconnects on the next Publish.
//   - ErrBlocked (also outbox.Unavailable): RabbitMQ blocks publishers on the
//     connection during a memory or disk alarm (connection.blocked). Nothing
//     more is sent on it until the broker unblocks it, since a write into a
//     connection the broker no longer reads would wait past any context.
//
// Publish sends the whole batch on one channel before it waits for confirms
// (a confirm may cover several messages); concurrent Publish calls each take
// a channel of their own from a pool over one connection. A batch with
// several messages of one key goes in waves (outbox.PublishWaves): a key's
// next message is sent once its previous one was confirmed, since a
// message returned or nacked does not stop the next one from being routed.
// After a failure, the later messages of its key in the batch get
// outbox.ErrHeldBack.
//
// # Consuming, ordering and duplicates
//
// NewSubscriber declares the exchange, the group's durable quorum queue bound
// with BindingKey, and its dead-letter queue; from then on the group receives
// every message published, even before Run. Subscribers of one group (in any
// number of processes) share the queue, each message going to one of them;
// each group gets every message.
//
// Run hands the messages to the handler one at a time and settles each after
// the handler returned: nil acks it. After an error Run holds the message,
// unacked, and hands it to the handler again after redelivery_delay
// (doubling up to redelivery_delay_max); the messages behind it wait. At a
// failure that is at least the max_deliveries-th, once the message has been
// failing for dead_letter_after, Run rejects it without requeue, which
// dead-letters it; an error wrapped with outbox.Permanent, or a message that
// is not an outbox event (cloudevents.ErrNotEvent), is rejected so at once.
// An error for which outbox.IsUnavailable holds (Inbox.Handler's when its
// database is down) pauses Run the same way without counting the failure.
// Holding the message rather than requeueing it keeps its place in the
// queue and leaves the queue's delivery count alone. When Run's context ends, the consumer is
// cancelled, the message in hand finishes and is acked, and Run returns nil.
// After a lost connection (a broker restart) Run reconnects by itself.
//
// One subscriber sees the messages of its queue in the order they were
// published, so messages with the same key arrive in order. A requeued
// message (a subscriber that stopped or crashed with the message in hand)
// is delivered again later, possibly after messages behind it; a message
// whose handler fails is held, so it keeps its place. Several subscribers
// of one group handle messages in parallel, so order holds only with a
// single subscriber per group.
//
// RabbitMQ does not drop duplicates: a message the relay publishes twice (a
// crash between the broker's confirm and marking the row SENT) is delivered
// twice, as is a message whose ack was lost. Handlers deduplicate by msg_id,
// which Inbox.Handler does.
//
// # The dead-letter path
//
// The group's queue has x-delivery-limit MaxDeliveries-1 (RabbitMQ counts
// the deliveries it allows again; since Run holds a failing message, only
// the deliveries the broker took back from a lost subscriber count there,
// and Run adds the x-delivery-count of a redelivered message to its own
// count) and dead-letters through the default
// exchange to DeadLetterQueue ("<queue>.dead"), a durable quorum queue, with
// at-least-once dead-lettering: the message leaves the queue only once the
// dead-letter queue has it. RabbitMQ adds an x-death header saying why
// (delivery_limit, rejected). The dead-letter queue has no consumer: inspect,
// move or purge it with the management tools. Before RabbitMQ 4.0, a
// message the broker takes back because its subscriber stopped or lost the
// connection counts as a delivery too; with the default Prefetch of 1 only
// the message in hand is exposed to that.
//
// The queue's arguments are fixed when it is first declared: changing
// MaxDeliveries or DeadLetterQueue of an existing group fails with
// ErrTopology (PRECONDITION_FAILED) until the queue is deleted, or its limit
// changed with a policy instead.
//
// # A consumer
//
//	sub, err := outboxamqp.NewSubscriber(ctx, outboxamqp.SubscriberConfig{
//		URL:   "amqp://app:secret@rabbit:5672/shop",
//		Group: "billing", // the queue "billing", dead letters in "billing.dead"
//	})
//	if err != nil {
//		return err
//	}
//	defer sub.Close()
//	return sub.Run(ctx, inbox.Handler("billing", func(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
//		// apply m in tx: it commits together with the inbox record of m.MsgID
//		return nil
//	}))
package outboxamqp
