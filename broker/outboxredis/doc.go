// Package outboxredis publishes outbox messages to Redis Streams and consumes
// them with consumer groups (DESIGN §4). The Publisher implements
// outbox.Publisher for the relay (`outbox relay --broker redis://...`); the
// Subscriber hands each message to an outbox.Handler, normally one built with
// Inbox.Handler. It uses github.com/redis/go-redis/v9 and needs Redis 6.2 or
// later (XAUTOCLAIM); it is tested against Redis 7.0.
//
// # URL
//
//	redis://[user:password@]host:port/db?stream=outbox:{topic}&maxlen=100000
//	rediss://...   (TLS, with the host name verified)
//
// The path is the database number (default 0); the port defaults to 6379.
// This package's query parameters, which PublisherConfig and
// SubscriberConfig fields of the same meaning override:
//
//	stream=T          stream key template; {topic} becomes the message's topic.
//	                  Default "outbox:{topic}": one stream per topic.
//	maxlen=N          trim each stream to about N entries on every XADD
//	                  (MAXLEN ~ N). Default: no trimming. Trimming drops
//	                  entries whether or not every group has read them.
//	dead=T            dead-letter stream template (subscriber); {stream},
//	                  {group} and {topic} are replaced.
//	                  Default "{stream}:dead:{group}".
//	minidle=D         how long a delivered entry may stay unacknowledged
//	                  before it is delivered again (subscriber). Default 30s.
//	maxdeliveries=N   failed deliveries before the dead-letter stream,
//	                  together with dead_letter_after (subscriber); also
//	                  max_deliveries. Default 5.
//	redelivery_delay=D      pause before a failed message is handed to the
//	                  handler again, doubling (subscriber). Default 1s.
//	redelivery_delay_max=D  the longest such pause (subscriber). Default 1m.
//	dead_letter_after=D     how long a message must fail before the
//	                  dead-letter stream (subscriber). Default 10m.
//
// Every other parameter goes to go-redis's ParseURL, which rejects names it
// does not know: dial_timeout, read_timeout, write_timeout (durations, or
// seconds), pool_size, max_retries, client_name, protocol (2 or 3), db,
// skip_verify (rediss only) and the rest of its Options' scalar fields in
// snake case. Each command also respects its context's deadline.
//
// # TLS, authentication, Cluster and Sentinel
//
// rediss:// connects with TLS;
// tls_ca names a PEM file of the CAs that sign the server's certificate
// (default: the system's roots), tls_cert and tls_key a client certificate
// and its key, tls_server_name the name checked in the certificate
// (default: the URL's host). A client certificate that has expired is
// refused at once with ErrConfig; a server's certificate that has expired or that
// another CA signed fails the handshake with an error that names the cause.
// The TLS parameters with redis:// are an error, never a plain-text
// connection. redis://user:password@host logs in as an ACL user (AUTH
// user password); redis://:password@host as the default user.
//
// cluster=true makes the URL's host and every addr parameter seeds of a
// Redis Cluster: redis://h1:6379?cluster=true&addr=h2:6379&addr=h3:6379. In
// a Cluster the default stream template is "outbox:{{topic}}", whose braces
// make the topic the key's hash tag, so that a stream and its dead-letter
// streams live in one slot (NewSubscriber refuses templates that break
// this). sentinel_master=NAME makes the URL's hosts Redis Sentinels that
// watch master NAME; the user and password are the master's. For anything
// else (sentinel passwords, read replicas), build a redis.UniversalClient
// and pass it as PublisherConfig.Client / SubscriberConfig.Client. ParseURL
// turns a URL into a PublisherConfig whose fields then win.
//
// # On the wire
//
// CloudEvents has no Redis binding; this package defines one after the Kafka
// binding (binary mode). Each message is one stream entry (XADD key * ...)
// with these fields, in this order:
//
//	ce_specversion   1.0
//	ce_id            msg_id
//	ce_source        PublisherConfig.Source ("/outbox" by default)
//	ce_type          topic
//	ce_time          created_at, RFC 3339 in UTC (omitted when unknown)
//	ce_partitionkey  msg_key (only when set)
//	ce_<name>        one per row header (names lower-cased, a-z and 0-9)
//	content-type     application/json
//	data             the payload, byte for byte
//
// Values are stored as they are: Redis field values are binary safe.
//
// # Acknowledgement
//
// The XADD reply, the new entry's id, acknowledges a message. It means the
// entry is in the server's memory, nothing more: with appendonly yes and
// appendfsync everysec up to about a second of acknowledged entries can be
// lost in a crash (appendfsync always: none, at a cost), without persistence
// everything is lost on restart, and a replica that takes over after a
// failover may lack the latest entries (replication is asynchronous; WAITAOF
// needs Redis 7.2).
//
// Publish sends each batch as pipelines of XADD commands and then reads the
// replies. Connection failures, timeouts, the end of ctx and replies that
// refuse every write alike (LOADING, READONLY, MASTERDOWN, BUSY, TRYAGAIN,
// CLUSTERDOWN, OOM, MISCONF, NOREPLICAS, "max number of clients reached",
// NOAUTH, WRONGPASS) satisfy outbox.IsUnavailable: the
// relay pauses and spends no retry. Any other error reply refuses that one
// message, e.g. WRONGTYPE when the stream key holds a string. Redis strings
// are binary-safe: every field travels as it is, and only a value over the
// server's proto-max-bulk-len (512 MiB by default) is not sent; its error
// satisfies outbox.IsUndeliverable.
//
// # Ordering and duplicates
//
// One stream keeps the order of its XADDs, and a pipeline keeps the order of
// its commands, so the messages of one topic reach the group in relay order.
// One Subscriber handles its entries one at a time in stream order; several
// subscribers of one group share the entries and so do not keep order
// between them. A message whose handler fails is held and handed to the
// handler again, so the messages behind it wait and keep their order.
//
// Redis does not deduplicate on publish: a message the relay publishes twice
// (a crash between publish and mark) is two entries, and the group gets both.
// Delivery is at least once in any case; consumers deduplicate by msg_id,
// through the inbox table (Inbox.Handler), or with Once where no database
// takes part.
//
// # Consumer groups and the dead-letter path
//
// NewSubscriber creates the group on the stream (XGROUP CREATE ... MKSTREAM)
// at its end, so the group gets every message added after NewSubscriber
// returns, even before Run. Run reads new entries with XREADGROUP ... BLOCK,
// calls the handler, and acknowledges with XACK once it returned nil. An
// entry whose handler failed stays claimed by its subscriber, which hands it
// to the handler again after redelivery_delay (doubling up to
// redelivery_delay_max); an error for which outbox.IsUnavailable holds
// (Inbox.Handler's when its database is down) pauses the same way without
// counting. An entry whose subscriber died stays pending; after MinIdle the
// next XAUTOCLAIM, by another subscriber of the group, delivers it again,
// and Redis counts that delivery (XPENDING). At a failed delivery that is at
// least the MaxDeliveries-th once the entry has been failing for
// dead_letter_after, at once for an error that satisfies
// outbox.IsPermanent, and at once for an entry that is not an event, a
// server-side script adds the entry to the dead-letter
// stream, with its original fields plus dead-reason, dead-stream, dead-id,
// dead-group and dead-deliveries, and acknowledges it. Subscriber.DeadLetters
// reads that stream; to retry a dead letter, XADD its fields to the stream
// again.
//
// # Consumer example
//
//	sub, err := outboxredis.NewSubscriber(ctx, outboxredis.SubscriberConfig{
//		URL:   "redis://localhost:6379/0",
//		Group: "billing",
//		Topic: "order.paid",
//	})
//	if err != nil {
//		return err
//	}
//	defer sub.Close()
//	return sub.Run(ctx, inbox.Handler("billing", func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
//		_, err := tx.Exec(ctx, "UPDATE accounts SET paid = true WHERE order_id = $1", m.Key)
//		return err
//	}))
package outboxredis
