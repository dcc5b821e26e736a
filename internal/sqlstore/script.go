package sqlstore

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// Script is the SQL that Migrate runs, for one dialect and table names,
// written out for a team whose schema changes go through another tool
// (goose, golang-migrate, Atlas) or a DBA. Run in order, it leaves the
// database as Migrate does, its versions recorded in the migrations table,
// so that the relay and `outbox migrate --check` find the schema current.
type Script struct {
	Dialect string
	Tables  outbox.Tables
	// MigrationsTable is the statement that creates the table of the
	// recorded versions, if it is missing. It runs before any migration.
	MigrationsTable string
	// Migrations are the versions in order.
	Migrations []ScriptMigration
}

// ScriptMigration is one version of the schema.
type ScriptMigration struct {
	Version int
	// Name is the migration's file name without ".sql": "001_create_tables".
	Name string
	// Statements are the migration's statements, without their final
	// semicolons.
	Statements []string
	// Record records the version in the migrations table (a statement
	// that does nothing when it is there already).
	Record string
}

// Latest is the newest version of the script.
func (s *Script) Latest() int { return s.Migrations[len(s.Migrations)-1].Version }

// ScriptFor returns the migrations of the named dialect ("postgres",
// "mysql", "sqlite") for tables, as Migrate would run them. It needs no
// database.
func ScriptFor(dialectName string, tables outbox.Tables) (*Script, error) {
	d, c, tables, err := compileFor(dialectName, tables)
	if err != nil {
		return nil, err
	}
	s := &Script{Dialect: d.name, Tables: tables, MigrationsTable: c.MigrationsTable}
	for _, m := range c.migrations {
		rec, err := literalRecord(c.RecordVersion, m.version, m.name)
		if err != nil {
			return nil, err
		}
		s.Migrations = append(s.Migrations, ScriptMigration{Version: m.version, Name: m.name,
			Statements: append([]string(nil), m.statements...), Record: rec})
	}
	return s, nil
}

// compileFor checks tables for the named dialect, defaulted, and compiles
// the dialect's SQL for them.
func compileFor(dialectName string, tables outbox.Tables) (dialect, *compiled, outbox.Tables, error) {
	d, ok := dialects[dialectName]
	if !ok {
		return d, nil, tables, fmt.Errorf("outbox: unknown dialect %q", dialectName)
	}
	tables = tables.WithDefaults()
	if err := tables.Validate(); err != nil {
		return d, nil, tables, err
	}
	if d.noSchemas {
		for _, name := range []string{tables.Outbox, tables.Inbox} {
			if _, _, qualified := outboxdriver.SplitTableName(name); qualified {
				return d, nil, tables, fmt.Errorf("%w: table %q: SQLite takes no schema; name the table alone (a schema is for PostgreSQL and MariaDB/MySQL)", outbox.ErrInvalidIdentifier, name)
			}
		}
	}
	c, err := d.compile(tables)
	return d, c, tables, err
}

// literalRecord is the dialect's recordVersion with its two arguments
// written in: the version, and the name, which comes from the embedded
// migrations' file names and is checked to need no escaping.
func literalRecord(stmt string, version int, name string) (string, error) {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c != '_' && (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return "", fmt.Errorf("outbox: migration name %q: only lower-case letters, digits and underscores", name)
		}
	}
	v, n := strconv.Itoa(version), "'"+name+"'"
	if strings.Contains(stmt, "$1") {
		return strings.NewReplacer("$1", v, "$2", n).Replace(stmt), nil
	}
	stmt = strings.Replace(stmt, "?", v, 1)
	return strings.Replace(stmt, "?", n, 1), nil
}
