package outboxdriver

import (
	"encoding/json"
	"time"
)

// Status is where a message is in its life. It only moves forward:
// NEW -> SENT, NEW -> DEAD; only an operator's explicit retry moves DEAD back to NEW.
type Status int16

const (
	// StatusNew: committed, waiting for the relay (or for its next retry).
	StatusNew Status = 0
	// StatusSent: the broker acknowledged durable receipt.
	StatusSent Status = 1
	// StatusDead: the retry limit was reached; kept for a person to inspect.
	StatusDead Status = 2
)

// String returns NEW, SENT or DEAD.
func (s Status) String() string {
	switch s {
	case StatusNew:
		return "NEW"
	case StatusSent:
		return "SENT"
	case StatusDead:
		return "DEAD"
	}
	return "UNKNOWN"
}

// Message is one row of the outbox table.
//
// A caller that writes a message fills MsgID, Topic, Payload and optionally Key and
// Headers; the remaining fields are set by the database and ignored by outbox.Writer.
type Message struct {
	// MsgID identifies the message for its whole life, on both sides: the relay
	// publishes it as the CloudEvents id and consumers deduplicate by it. Made by
	// the business, e.g. "order-42:OrderPaid". 1 to 64 characters and at most
	// 255 bytes (outbox.MaxShortStringBytes), printable text (outbox.TextProblem).
	MsgID string
	// Topic names the kind of event, e.g. "order.paid"; it is the CloudEvents
	// type and the default destination on a broker. 1 to 128 characters and at
	// most 255 bytes, printable text.
	Topic string
	// Key is the optional ordering and partition key (at most 128
	// characters, printable text).
	// Within one batch, messages with the same key are published in id order;
	// across batches order is not guaranteed yet (see the package documentation).
	Key string
	// Payload is the complete event as JSON. Consumers should need nothing else.
	Payload json.RawMessage
	// Headers are optional string attributes, carried as CloudEvents extension
	// attributes: names are 1 to 64 lower-case letters and digits, which every
	// transport carries unchanged, and not a name the CloudEvents mapping sets
	// itself (id, type, time...); values are printable text; names and values
	// together take at most 8192 bytes (outbox.MaxHeadersBytes).
	Headers map[string]string

	// ID is the row's id, assigned by the database in commit-independent order.
	ID int64
	// Status is the row's status.
	Status Status
	// Retries counts failed publish attempts.
	Retries int
	// CreatedAt is when the row was inserted (database clock).
	CreatedAt time.Time
	// NextRetryAt is the earliest time the relay may publish the row again.
	NextRetryAt time.Time
	// SentAt is when the row was marked SENT (database clock): on PostgreSQL
	// when its batch was claimed, on MariaDB/MySQL and SQLite when the relay
	// recorded the broker's ack. Zero unless SENT.
	SentAt time.Time
	// LastError is the error of the latest failed attempt, if any.
	LastError string
	// DeadAt is when the row became DEAD (database clock); zero unless DEAD.
	DeadAt time.Time
}
