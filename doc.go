// Package outbox is a transactional outbox: it lets a service change its
// database and announce the change to a message broker without ever doing one
// and not the other.
//
// A service that updates a row and then publishes an event has two writes to two
// systems, and no transaction spans both: a crash between them, or a broker that
// is down, loses the event or announces a change that was rolled back. The
// outbox removes the second write from the request. The event is inserted as a
// row of the outbox table in the same database transaction as the business
// change, so the two commit or roll back together; a relay then reads committed
// rows and publishes them, and records each one as sent only after the broker
// has acknowledged it. Delivery is therefore at least once, and the consumer's
// side, the inbox, turns that into an effect that happens once.
//
// # Guarantees
//
// Each of these is tested against real databases (see package drivertest):
//
//   - Nothing lost: a committed message is published at least once, whatever
//     crashes, and whenever its transaction commits, including a long
//     transaction that commits after messages with higher ids were relayed.
//   - Nothing invented: a rolled-back transaction publishes nothing, because
//     the relay only ever sees committed rows.
//   - Effect once: through an [Inbox], a consumer's change happens once per
//     msg_id and consumer group, however often the broker delivers the message.
//   - Status only moves forward: NEW becomes SENT or DEAD ([Status]). A NEW row
//     is never deleted; only an explicit RetryDead moves DEAD back to
//     NEW, and it records a note in last_error.
//
// Per-key order: a message with a key is published only after every earlier
// message of its key (by id) is SENT or DEAD, across batches and any number
// of relays, on every driver that implements outboxdriver.KeyOrderer (all
// three SQL drivers do). A failing message holds back only the later messages of its
// key. When it goes DEAD the key flows on, unless [RelayConfig].StopKeyAtDead
// keeps it stopped until the message is retried or dropped. Within a batch, a
// [Publisher] keeps a key's messages in id order and holds the rest of the key
// back after a failure ([ErrHeldBack]); [PublishFunc] does both. Messages
// without a key are published in no promised order.
//
// # The pieces
//
// A [Writer] inserts messages inside the caller's own transaction, whatever
// its type: a pgx.Tx with the outboxpgx driver, a *sql.Tx with the others.
// [Writer.Write] validates every message first, and inserts all of them or
// none.
//
// A [Relay] claims a batch of due messages, hands it to a [Publisher], and
// records every message's outcome in one transaction: sent, retried later with
// exponential backoff, or DEAD after [RelayConfig].MaxRetries refusals.
// [Relay.Run] loops until its context is cancelled and then finishes the batch
// in flight; while the broker has one batch it already claims the next, as far
// as the store allows (outboxdriver.ClaimOverlapper). [Relay.RunOnce] does one batch,
// which suits tests and cron-like callers. [Relay.Wake] makes a waiting relay look at once, for example from a
// LISTEN loop of your own. Several relays, in one process or many, may run
// against one table.
//
// A [Publisher] delivers a batch and says, per message, whether the broker
// acknowledged it. Broker adapters implement it (package
// [github.com/outbox-go/outbox/webhook] for HTTP); three adapters cover the
// rest: [PublishFunc] wraps a function that publishes one message, for
// in-process consumers and tests; [BatchPublishFunc] wraps a function with
// Publish's own signature; [Discard] acknowledges everything and sends
// nothing, for measuring the relay itself.
//
// An [Inbox] is the consumer's half. [Inbox.Process] runs the consumer's
// change in a new transaction together with a record of (consumer group,
// msg_id) in the consumed_msg table, and skips the change when the record is
// already there; [Inbox.MarkTx] does the same inside a transaction the caller
// already has. The record and the change commit together, which is what makes
// the effect happen once.
//
// A driver is the seam between this package and one database library. Each
// driver is a module of its own, so that an application compiles only the
// database client it uses:
//
//   - [github.com/outbox-go/outbox/driver/outboxpgx]: PostgreSQL through pgx
//     (pgx.Tx), or through pgx's database/sql adapter (*sql.Tx).
//   - [github.com/outbox-go/outbox/driver/outboxmysql]: MariaDB and MySQL
//     (*sql.Tx).
//   - [github.com/outbox-go/outbox/driver/outboxsqlite]: SQLite in pure Go
//     (*sql.Tx).
//
// An application passes its driver to [NewWriter], [NewInbox], [NewRelay]
// and [NewCleaner], and calls the driver's own methods to look after the
// table: Migrate and SchemaVersion, Stats, ListMessages, GetMessage,
// RetryDead, DropDead, DeleteSent and DeleteConsumed. The outbox command
// line (module github.com/outbox-go/outbox/cmd/outbox) is built on these
// calls; a [Cleaner] runs the last two round after round, and package
// [github.com/outbox-go/outbox/admin] serves the others over HTTP.
//
// The contract a driver implements, and the optional capabilities the
// relay uses where a driver has them, are in package
// [github.com/outbox-go/outbox/outboxdriver], for driver authors; it is not
// stable. Tables are named by [Tables]; the zero value means "outbox" and
// "consumed_msg".
//
// # Errors
//
// Errors are values to act on, tested with [errors.Is] and [errors.As]:
//
//   - [ErrDuplicate], concretely a [*DuplicateError] that lists the msg_ids:
//     [Writer.Write] found a msg_id already in the table or repeated in the
//     call. Nothing of the call was inserted and the transaction is still
//     usable, so a caller that derives msg_ids from the business fact (such as
//     "order-42:OrderPaid") can treat it as "already recorded" and commit.
//   - [ErrInvalidMessage], concretely a [*ValidationError] that names the
//     message, the field and the reason: a message breaks a limit of the
//     table. Nothing was written and the transaction is still usable. This is
//     usually a bug in the caller, not something to retry.
//   - [ErrPayloadTooLarge]: the payload is over [WriterConfig].MaxPayloadBytes.
//     It comes inside a *ValidationError, so errors.Is(err, ErrInvalidMessage)
//     holds too. Put ids and key fields in the event rather than whole
//     objects, or raise the limit.
//   - [ErrUnavailable], made with [Unavailable] and tested with
//     [IsUnavailable]: for Publisher authors. Wrap an error that means the
//     broker could not be reached at all; the relay then leaves the message
//     untouched and pauses with its own backoff instead of spending the
//     message's retries on an outage. Any other error counts as a refusal of
//     that message. A [Handler]'s error made with [DatabaseUnavailable] (the
//     drivers return one when the database cannot be reached) satisfies it
//     too: the subscriber pauses and hands the same message to the handler
//     again, without counting a delivery toward its dead-letter limit.
//   - [ErrHeldBack]: for Publisher authors too. Return it for a message not
//     attempted because an earlier message of the same key failed in the
//     batch; the relay leaves it untouched and does not pause.
//   - [ErrSchemaMissing]: the outbox tables do not exist. Run the driver's
//     Migrate or `outbox migrate` first.
//   - [ErrNotFound]: a driver's GetMessage found no message with that msg_id.
//   - [ErrInvalidIdentifier]: a table name in [Tables] is not a plain
//     lower-case SQL identifier. Drivers check names once, when they are
//     built, and never paste a name they have not checked into SQL.
//
// # A sketch with pgx
//
// Build the driver once, and create the tables (or run `outbox migrate`):
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db.internal:5432/shop")
//	...
//	drv, err := outboxpgx.New(pool, outbox.Tables{})
//	...
//	if err := drv.Migrate(ctx); err != nil { ... }
//	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
//
// Write the message in the transaction that makes the change it describes:
//
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, "UPDATE orders SET status = 'paid' WHERE id = $1", 42); err != nil {
//			return err
//		}
//		return w.Write(ctx, tx, outbox.Message{
//			MsgID:   "order-42:OrderPaid",
//			Topic:   "order.paid",
//			Key:     "order-42",
//			Payload: json.RawMessage(`{"order":42,"amount":"19.90"}`),
//		})
//	})
//
// Run a relay, in this process or another, until ctx is cancelled:
//
//	relay, err := outbox.NewRelay(drv, publisher, outbox.RelayConfig{})
//	...
//	err = relay.Run(ctx)
//
// On the consumer's side, apply each delivery through the inbox, and ack the
// delivery when Process returns a nil error, whether applied or not:
//
//	inbox := outbox.NewInbox(drv)
//	applied, err := inbox.Process(ctx, "mailer", msgID, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, "INSERT INTO emails (order_id) VALUES ($1)", 42)
//		return err
//	})
//
// The driver packages have runnable versions of this sketch for each
// database.
package outbox
