package outboxdriver

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidIdentifier reports a table name that is not a plain SQL identifier.
var ErrInvalidIdentifier = errors.New("outbox: invalid identifier")

// Default table names.
const (
	DefaultOutboxTable = "outbox"
	DefaultInboxTable  = "consumed_msg"
)

// maxTableName leaves room for the suffixes of derived names (indexes, the
// migrations table) inside PostgreSQL's 63-byte identifier limit.
const maxTableName = 48

// Tables names the two tables. A zero field takes its default. A name may
// be qualified by a schema (PostgreSQL) or a database (MariaDB/MySQL):
// "events.outbox". The tables, sequences and functions an outbox table brings
// with it go into its schema; the schema must exist.
type Tables struct {
	// Outbox is the outbox table. Defaults to "outbox".
	Outbox string
	// Inbox is the consumers' deduplication table. Defaults to "consumed_msg".
	Inbox string
}

// WithDefaults returns t with empty names defaulted.
func (t Tables) WithDefaults() Tables {
	if t.Outbox == "" {
		t.Outbox = DefaultOutboxTable
	}
	if t.Inbox == "" {
		t.Inbox = DefaultInboxTable
	}
	return t
}

// Validate checks that both names are plain identifiers that every supported
// database accepts unquoted and folds the same way: a lower-case letter or
// underscore, then lower-case letters, digits or underscores, at most 48 bytes;
// each optionally after a schema name of the same form (at most 63 bytes)
// and a dot. SQLite takes no schema (its driver refuses one).
func (t Tables) Validate() error {
	if err := ValidateIdentifier(t.Outbox); err != nil {
		return err
	}
	if err := ValidateIdentifier(t.Inbox); err != nil {
		return err
	}
	if t.Outbox == t.Inbox {
		return fmt.Errorf("%w: outbox and inbox tables are both %q; give them different names", ErrInvalidIdentifier, t.Outbox)
	}
	for _, suffix := range derivedSuffixes {
		if t.Inbox == t.Outbox+suffix {
			return fmt.Errorf("%w: inbox table %q is the name of a table or index the outbox table %q brings with it; give the inbox another name", ErrInvalidIdentifier, t.Inbox, t.Outbox)
		}
	}
	return nil
}

// derivedSuffixes make the names of what an outbox table brings with it:
// its migrations, claims and horizon tables, its indexes and constraints
// (and, on PostgreSQL, its primary key index and identity sequence). An
// inbox table of one of these names would clash: a migration's CREATE ...
// IF NOT EXISTS would skip it, or create one in the other's place.
var derivedSuffixes = []string{"_migrations", "_claims", "_horizon", "_msg_id_key", "_pending_idx",
	"_requeued_idx", "_dead_idx", "_key_idx", "_requeued_key_idx", "_status_check", "_msg_id_check", "_pkey", "_id_seq"}

// maxSchemaName is PostgreSQL's identifier limit (MySQL's is 64).
const maxSchemaName = 63

// ValidateIdentifier reports whether name can be used as a table name:
// table or schema.table.
func ValidateIdentifier(name string) error {
	schema, table, qualified := SplitTableName(name)
	if !qualified {
		return validateName(name, "table name", maxTableName)
	}
	if err := validateName(schema, "schema name", maxSchemaName); err != nil {
		return fmt.Errorf("%w (in table name %q)", err, name)
	}
	return validateName(table, "table name", maxTableName)
}

// SplitTableName splits "schema.table" at its dot; qualified is false for a
// name without one, whose table is name.
func SplitTableName(name string) (schema, table string, qualified bool) {
	schema, table, qualified = strings.Cut(name, ".")
	if !qualified {
		return "", name, false
	}
	return schema, table, true
}

func validateName(name, what string, limit int) error {
	if name == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalidIdentifier, what)
	}
	if len(name) > limit {
		return fmt.Errorf("%w: %s %q is %d bytes; the limit is %d", ErrInvalidIdentifier, what, name, len(name), limit)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c == '_' || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return fmt.Errorf("%w: %s %q: use lower-case letters, digits and underscores, starting with a letter or underscore (and one dot after a schema name)", ErrInvalidIdentifier, what, name)
		}
	}
	return nil
}
