// Package drivertest is the suite that every outbox driver passes against a
// real database. It is what "a driver" means: the guarantees of package outbox
// (nothing lost, nothing invented, effect once, status only moves forward) are
// checked here once, and every driver runs the same checks, so a dialect cannot
// quietly behave differently.
//
// The package lives in the core module (github.com/outbox-go/outbox) and uses
// only the standard library and package testing. A driver's own module imports
// it from its tests.
//
// # Using it
//
// A driver module calls [Run] from one test with a [Setup]. The Setup makes a
// fresh, isolated namespace for one test (a schema on PostgreSQL, a database on
// MySQL, a file on SQLite), builds the driver on it, migrates it, registers the
// cleanup on t, and returns an [Env]. The tests run with t.Parallel, which is
// why each needs a namespace of its own. A database/sql driver can build its
// Env with [SQLEnv]:
//
//	func setup(t *testing.T) *drivertest.Env[*sql.Tx] {
//		db, err := outboxsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(func() { db.Close() })
//		d, err := outboxsqlite.New(db, outbox.Tables{})
//		if err != nil {
//			t.Fatal(err)
//		}
//		if err := d.Migrate(context.Background()); err != nil {
//			t.Fatal(err)
//		}
//		return drivertest.SQLEnv(d, db, nil, func(tb outbox.Tables) (outboxdriver.Driver[*sql.Tx], error) {
//			return outboxsqlite.New(db, tb)
//		}, false)
//	}
//
//	func TestSQLite(t *testing.T) { drivertest.Run(t, setup) }
//
// The suite's own statements use '?' placeholders; a driver whose database
// wants another form passes a rewrite function to SQLEnv (outboxpgx turns '?'
// into $1, $2, ...).
//
// A Setup should fail the test, not skip it, when its database cannot be
// reached: a skipped suite looks like a passing one.
//
// # Feature flags
//
// Where a database cannot do something, the Env says so and the suite adapts
// its checks instead of the driver faking it. [Env].ConcurrentWriters is false
// for SQLite, whose writers take turns: the suite then does not hold two
// writing transactions open at once. [Env].IdleInTxTimeout gives a store whose
// connections the server ends when a transaction stays idle (nil where the
// database cannot).
package drivertest
