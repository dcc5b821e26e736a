package sqlstore

import (
	"fmt"
	"strings"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// Roles names the database roles (PostgreSQL) or accounts (MariaDB/MySQL:
// "name" for 'name'@'%', or "name@host") that Grants writes statements for.
// An empty field leaves its role out.
type Roles struct {
	// Writer may only insert messages: INSERT on the columns a sidecar
	// writes, and SELECT on msg_id alone, which ON CONFLICT (msg_id) and
	// the writer's duplicate report read. It cannot read payloads, update
	// or delete.
	Writer string
	// Relay may claim, publish and mark: SELECT on the outbox, UPDATE on
	// the columns the relay and `outbox dead retry` change, and the
	// tables of its leases; no DROP, no ALTER (it owns nothing).
	Relay string
	// Cleanup adds DELETE on the outbox and the inbox for Relay, for a
	// relay that runs the cleanup (--cleanup-older-than) and for `outbox
	// dead drop`.
	Cleanup bool
	// Migrator owns the schema: it runs `outbox migrate` and these grants.
	Migrator string
}

// GrantSection is the statements of one role.
type GrantSection struct {
	Role       string // "writer", "relay", "relay cleanup", "migrator"
	Comment    string
	Statements []string
}

// relayColumns are the columns the relay's marks, its triggers and `outbox
// dead retry` update (dead retry adds the outboxretried header).
const relayColumns = "status, retries, next_retry_at, sent_at, last_error, dead_at, headers"

// writerColumns are the columns a writer inserts; the others take defaults.
const writerColumns = "msg_id, topic, msg_key, payload, headers"

// Grants returns the statements that give roles the least privileges their
// work needs on the tables of the named dialect, to be run by the tables'
// owner (the migrator) once `outbox migrate` has created them. SQLite has
// no roles.
func Grants(dialectName string, tables outbox.Tables, r Roles) ([]GrantSection, error) {
	d, _, tables, err := compileFor(dialectName, tables)
	if err != nil {
		return nil, err
	}
	var to func(string) (string, error)
	switch d.name {
	case "postgres":
		to = func(role string) (string, error) { return pgRole(d, role) }
	case "mysql":
		to = mysqlAccount
		if _, _, qualified := outboxdriver.SplitTableName(tables.Outbox); !qualified {
			return nil, fmt.Errorf("%w: MySQL grants name the database: qualify the outbox table (database.outbox)", outbox.ErrInvalidIdentifier)
		}
	default:
		return nil, fmt.Errorf("outbox: %s has no roles to grant to", d.name)
	}
	n := strings.NewReplacer(d.names(tables)...)
	schema, _, _ := outboxdriver.SplitTableName(tables.Outbox)
	var out []GrantSection
	add := func(what, role, comment string, stmts []string) error {
		if role == "" {
			return nil
		}
		who, err := to(role)
		if err != nil {
			return fmt.Errorf("%s role: %w", what, err)
		}
		sec := GrantSection{Role: what, Comment: comment}
		for _, s := range stmts {
			sec.Statements = append(sec.Statements, strings.ReplaceAll(n.Replace(s), "{{role}}", who))
		}
		out = append(out, sec)
		return nil
	}
	g := grantStatements(d.name, schema, d.quote, r.Cleanup)
	for _, e := range []struct {
		what, role string
	}{{"migrator", r.Migrator}, {"writer", r.Writer}, {"relay", r.Relay}} {
		if err := add(e.what, e.role, g[e.what].comment, g[e.what].stmts); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type grantSet struct {
	comment string
	stmts   []string
}

// grantStatements are the dialect's grants, with the tables as
// placeholders and {{role}} for the grantee.
func grantStatements(dialectName, schema string, quote func(string) string, cleanup bool) map[string]grantSet {
	if dialectName == "postgres" {
		var usage []string
		if schema != "" {
			usage = []string{"GRANT USAGE ON SCHEMA " + quote(schema) + " TO {{role}}"}
		}
		relay := append(append([]string(nil), usage...),
			"GRANT SELECT, UPDATE ("+relayColumns+") ON {{outbox}} TO {{role}}",
			"GRANT SELECT, INSERT, UPDATE, DELETE ON {{claims}} TO {{role}}",
			"GRANT SELECT, UPDATE ON {{horizon}} TO {{role}}",
			"GRANT SELECT ON {{migrations}} TO {{role}}")
		if cleanup {
			relay = append(relay, "GRANT DELETE ON {{outbox}} TO {{role}}", "GRANT SELECT, DELETE ON {{inbox}} TO {{role}}")
		}
		migrator := []string{"GRANT CREATE ON SCHEMA public TO {{role}}"}
		if schema != "" {
			migrator = []string{"ALTER SCHEMA " + quote(schema) + " OWNER TO {{role}}"}
		}
		return map[string]grantSet{
			"migrator": {"owns the schema; run as a superuser or the schema's owner, before 'outbox migrate'", migrator},
			"writer": {"inserts messages; the identity column's sequence needs no grant (the INSERT draws from it)",
				append(append([]string(nil), usage...),
					"GRANT INSERT ("+writerColumns+") ON {{outbox}} TO {{role}}",
					"GRANT SELECT (msg_id) ON {{outbox}} TO {{role}}")},
			"relay": {"claims, publishes and marks; advisory locks need no grant", relay},
		}
	}
	relay := []string{
		"GRANT SELECT, UPDATE (" + relayColumns + ") ON {{outbox}} TO {{role}}",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON {{claims}} TO {{role}}",
		"GRANT SELECT ON {{migrations}} TO {{role}}",
	}
	if cleanup {
		relay = append(relay, "GRANT DELETE ON {{outbox}} TO {{role}}", "GRANT SELECT, DELETE ON {{inbox}} TO {{role}}")
	}
	return map[string]grantSet{
		"migrator": {"owns the database's tables and passes the grants below on",
			[]string{"GRANT ALL PRIVILEGES ON " + quote(schema) + ".* TO {{role}} WITH GRANT OPTION"}},
		"writer": {"inserts messages; AUTO_INCREMENT needs no grant",
			[]string{"GRANT INSERT (" + writerColumns + "), SELECT (msg_id) ON {{outbox}} TO {{role}}"}},
		"relay": {"claims, publishes and marks; GET_LOCK needs no grant", relay},
	}
}

// pgRole quotes a PostgreSQL role name, which must be an identifier of
// the form table names take.
func pgRole(d dialect, role string) (string, error) {
	if err := validRoleName(role); err != nil {
		return "", err
	}
	return d.quote(role), nil
}

// mysqlAccount writes "name" or "name@host" as 'name'@'host' ('%' when no
// host is given); name as a table name, host letters, digits, '.', '-',
// '_', '%' or ':'.
func mysqlAccount(account string) (string, error) {
	name, host, ok := strings.Cut(account, "@")
	if !ok {
		host = "%"
	}
	if err := validRoleName(name); err != nil {
		return "", err
	}
	if host == "" {
		return "", fmt.Errorf("%w: account %q has an empty host", outbox.ErrInvalidIdentifier, account)
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(".-_%:", c) >= 0) {
			return "", fmt.Errorf("%w: account %q: a host takes letters, digits and . - _ %% :", outbox.ErrInvalidIdentifier, account)
		}
	}
	return "'" + name + "'@'" + host + "'", nil
}

func validRoleName(role string) error {
	if err := outboxdriver.ValidateIdentifier(role); err != nil || strings.Contains(role, ".") {
		return fmt.Errorf("%w: role %q: use lower-case letters, digits and underscores, starting with a letter or underscore", outbox.ErrInvalidIdentifier, role)
	}
	return nil
}
