// Package outboxkafka publishes outbox messages to Kafka and consumes them in
// consumer groups, with franz-go (github.com/twmb/franz-go). Publisher
// implements outbox.Publisher for the relay; Subscriber hands each message to
// an outbox.Handler, usually one built with Inbox.Handler.
//
// # URL
//
//	kafka://[user:password@]host:9092[,host2:9092,...][?param=value&...]
//
// A host without a port gets 9092. The user and password, when present,
// authenticate with SASL (PLAIN unless sasl says otherwise); use them with
// tls=true, since PLAIN sends the password as it is. Errors and logs show the
// URL with the password masked. An unknown parameter is an error. A config
// field that is set wins over its parameter.
//
//	topic              destination topic template; "{topic}" is the row's topic
//	                   (PublisherConfig.Destination / SubscriberConfig.Destination;
//	                   default "{topic}", e.g. "outbox.{topic}")
//	source             CloudEvents source attribute (default "/outbox")
//	client_id          Kafka client id (default "outbox")
//	timeout            bounds one Publish call; for the subscriber, one produce to the
//	                   dead-letter topic and one commit (default 30s)
//	dial_timeout       bounds one connection attempt and NewPublisher's check (default 10s)
//	max_message_bytes  largest record batch; keep it <= the topic's max.message.bytes
//	                   (default 1000012)
//	compression        none, gzip, snappy, lz4 or zstd (default snappy)
//	auto_create        true lets the broker create missing destination topics (default false)
//	tls                true for TLS with the system's roots (default false)
//	tls_ca, tls_cert, tls_key, tls_server_name  TLS files and name; any of them turns TLS on
//	sasl               plain, scram-sha-256, scram-sha-512 or oauthbearer (default plain
//	                   with a user)
//	dlt                subscriber: dead-letter topic template; "{topic}" is the consumed
//	                   Kafka topic (default "{topic}.dlt")
//	max_deliveries     subscriber: failed handler calls before the dead-letter topic,
//	                   together with dead_letter_after (default 5)
//	redelivery_delay   subscriber: pause before a failed message is handled again;
//	                   it doubles after each failure (default 1s)
//	redelivery_delay_max  subscriber: the largest such pause (default 1m)
//	dead_letter_after  subscriber: a message goes to the dead-letter topic only after
//	                   failing for this long and max_deliveries times (default 10m)
//	retry_backoff      subscriber: pause before a failed fetch or dead-letter produce is
//	                   tried again; it doubles, to at most 20 times this value
//	                   (default 100ms)
//	concurrency        subscriber: partitions handled at once (default 16)
//	session_timeout    subscriber: how long the group waits for a silent (crashed) member
//	                   before giving its partitions to the others; within the brokers'
//	                   group.min/max.session.timeout.ms (default 45s)
//	rebalance_timeout  subscriber: how long a member may take to finish the records in
//	                   hand when the group rebalances; keep it above the longest handler
//	                   call (default 1m)
//
// # TLS and authentication
//
// tls_ca names a PEM file of the CAs that sign the brokers' certificates
// (default: the system's roots), tls_cert and tls_key a client certificate
// and its key, tls_server_name the name checked in the brokers' certificates
// (default: each broker's host). Any of them turns TLS on; tls=false with
// them is an error, so a URL never falls back to plain text. A client
// certificate that has expired is refused by NewPublisher (ErrConfig);
// a broker certificate that has expired or that another CA signed fails the
// handshake with an outbox.IsUnavailable error that names the cause.
//
// SASL: kafka://user:password@host uses PLAIN; sasl=scram-sha-256 or
// sasl=scram-sha-512 use SCRAM; sasl=oauthbearer sends the URL's password
// as the token (kafka://:TOKEN@host; a user, when given, is the
// authorization id). PublisherConfig.SASL takes any franz-go mechanism, for
// a token that refreshes. PublisherConfig.Client takes a *kgo.Client of
// your own, and SubscriberConfig.ClientOpts options of your own for the
// subscriber's client. ParseURL turns a URL into a PublisherConfig whose
// fields then win.
//
// Credentials the brokers refuse at start-up (SASL_AUTHENTICATION_FAILED,
// UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE) fail NewPublisher and
// NewSubscriber with an error that wraps ErrRefusedLogin and is not
// outbox.IsUnavailable: the relay command exits at once instead of waiting
// for the broker. The error names the URL with its password masked and
// never contains the password or token. A broker that closes the connection
// instead of answering with one of these codes looks unreachable. Once a
// publisher has connected, a refusal of the login (the password changed, a
// token expired) is outbox.Unavailable: the relay pauses and tries again,
// and the messages keep their retries.
//
// # On the wire
//
// Each message is one record, in the binary mode of the CloudEvents Kafka
// binding: the record key is msg_key (none when the row has no key), the value
// is the payload, byte for byte, and the attributes are headers:
//
//	ce_specversion:  1.0
//	ce_id:           msg_id
//	ce_type:         topic
//	ce_source:       the configured source
//	ce_time:         created_at, RFC 3339 in UTC (when known)
//	ce_partitionkey: msg_key (when set)
//	ce_<name>:       one per row header
//	content-type:    application/json
//
// # What counts as an ack
//
// The producer is idempotent and asks for acks=all: a message is acked when
// the partition leader has appended it and every in-sync replica has it, so
// that it survives the loss of the leader. (How durable that is depends on
// the topic's replication factor and min.insync.replicas; Kafka does not fsync
// per record.) Publish produces the whole batch without waiting and then
// waits for the acks; there is no linger.
//
// A record larger than max_message_bytes (ErrTooLarge) or a destination that
// is not a valid topic name is found before anything is sent: the message
// fails alone, with an error that satisfies outbox.IsUndeliverable, and the
// relay makes it DEAD at once. Any other message that cannot be sent fails as
// a refusal that spends one of its retries: a topic that does not exist (ErrUnknownTopic: Publish asks
// the cluster, with one metadata request, about each topic it has not yet
// seen exist, so this refusal comes at once and does not depend on the
// deadline), or a record the broker refuses (MESSAGE_TOO_LARGE,
// INVALID_RECORD, CORRUPT_MESSAGE, TOPIC_AUTHORIZATION_FAILED: any error code
// franz-go does not retry itself). The broker refuses a whole record batch,
// and franz-go fails every record buffered for that partition with it; when
// that happens to several records for what a batch holds (MESSAGE_TOO_LARGE,
// RECORD_LIST_TOO_LARGE, INVALID_RECORD, CORRUPT_MESSAGE, INVALID_TIMESTAMP),
// Publish sends them again one at a time, in order, so that only the record
// at fault is refused: the others are acked, and the later ones of its key
// are held back (outbox.ErrHeldBack, no retry spent). That also lets small
// records through to a topic whose max.message.bytes is below
// max_message_bytes, at one round trip each. A broker
// that cannot be reached, a record still without an ack when the context or
// timeout ends, the codes that say the cluster cannot take writes
// (NOT_ENOUGH_REPLICAS, LEADER_NOT_AVAILABLE, REQUEST_TIMED_OUT and the
// like, which franz-go normally retries by itself), and a client the brokers
// reject after start-up (SASL, IDEMPOTENT_WRITE) are outbox.Unavailable: the
// relay pauses and the messages keep their retries.
// A record that was in flight when Publish gave up may still be written: the
// idempotent producer does not drop a record it has sent without an answer
// (it cannot know whether the broker has it), and writes it when the broker
// is back. The relay publishes it again, after it on the same partition, so
// the order of first deliveries holds and the consumers' inbox drops the copy.
//
// # Order and duplicates
//
// The key picks the partition (franz-go's default partitioner hashes it
// like Kafka's Java client), and a partition keeps the order of its records,
// so messages with the same key reach a consumer in the order they were
// published. The idempotent producer keeps that order across its own
// retries. A batch with several messages of one key goes in waves
// (outbox.PublishWaves): a key's next message is produced only once its
// previous one has its ack, so a broker refusal of one record batch cannot
// let a later message of the key be written first. Within one Publish call,
// a keyed message that fails (refused before sending, refused by the broker,
// or without an ack) holds back the later messages of its key, which get
// outbox.ErrHeldBack and are not produced.
//
// Kafka does not deduplicate by msg_id: the idempotent producer drops only
// its own retries of a request. A message the relay publishes twice (a crash
// between publish and mark) is delivered twice; the inbox keeps the effect
// once.
//
// # Consuming and the dead-letter path
//
// A Subscriber is a member of a Kafka consumer group. Offsets are committed
// by the subscriber itself, never automatically: a record's offset is
// committed only after the handler returned nil for it, or after it was
// written (and acked) to the dead-letter topic. The records of a partition
// are handled one after another. When the handler fails, the record is
// handed to it again after a backoff, while the later records of its
// partition wait, up to max_deliveries calls; then it is produced to the
// dead-letter topic (default "<topic>.dlt", created by NewSubscriber when
// missing, with retention.ms -1: kept until deleted) with its key, value and headers, plus outbox-dlt-group,
// outbox-dlt-error, outbox-dlt-deliveries, outbox-dlt-topic,
// outbox-dlt-partition, outbox-dlt-offset and outbox-dlt-time, and
// committed. An error wrapped with outbox.Permanent, and a record that is not
// an outbox event, go there at once. DeadLetters reads them back. A copy
// that would be larger than max_message_bytes (or than the dead-letter
// topic's max.message.bytes) gets a shorter outbox-dlt-error first, then
// only outbox-dlt-group, -topic, -partition and -offset, and last goes as it
// was consumed, without dead-letter headers. A record the dead-letter topic
// refuses even so is not committed (that would lose it): its partition
// waits, the refusal is logged at Error once a minute with what to change,
// and the produce is tried again.
//
// The count of deliveries lives in the subscriber's memory: after a restart
// or a rebalance, a record that had failed is handed to the handler up to
// max_deliveries more times. A new group starts at the earliest offset still
// retained. Partitions are not taken away while a poll's records are being
// handled: the subscriber commits what it finished, then lets the rebalance
// happen. When Run's context ends, the handler calls in hand finish (their
// context is not canceled), their offsets are committed, the member leaves
// the group and Run returns nil. After a broker restart the client reconnects
// by itself, and the group resumes from the committed offsets.
//
// # Consumer example
//
//	inbox := outbox.NewInbox(driver) // the consumer's database
//	sub, err := outboxkafka.NewSubscriber(ctx, outboxkafka.SubscriberConfig{
//		URL:    "kafka://kafka1:9092,kafka2:9092?topic=outbox.{topic}",
//		Group:  "billing",
//		Topics: []string{"order.paid"},
//	})
//	if err != nil {
//		return err
//	}
//	defer sub.Close()
//	return sub.Run(ctx, inbox.Handler("billing", func(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
//		var paid OrderPaid
//		if err := json.Unmarshal(m.Payload, &paid); err != nil {
//			return outbox.Permanent(err) // no redelivery can fix it
//		}
//		_, err := tx.ExecContext(ctx, `UPDATE invoices SET paid = true WHERE order_id = $1`, paid.OrderID)
//		return err
//	}))
package outboxkafka
