package datalayers_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/outboxdriver"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	gormmysql "gorm.io/driver/mysql"
	gormpostgres "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"entgo.io/ent/dialect"
	"github.com/outbox-go/outbox/examples/datalayers"
	"github.com/outbox-go/outbox/examples/datalayers/sqlc/ordersmysql"
	"github.com/outbox-go/outbox/examples/datalayers/sqlc/orderspg"
)

// database is one test database with the outbox migrated and an orders table.
type database struct {
	name   string // "postgres" or "mysql"
	db     *sql.DB
	writer *outbox.Writer[*sql.Tx]
	count  string // counts the outbox rows of one msg_id
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// postgres makes a schema of its own on the test server (failing, not
// skipping, when the server is down).
func postgres(t *testing.T) *database {
	t.Helper()
	base := env("OUTBOX_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test")
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	schema := fmt.Sprintf("datalayers_%d", time.Now().UnixNano())
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("PostgreSQL at %s: %v", base, err)
	}
	t.Cleanup(func() { admin.Exec("DROP SCHEMA " + schema + " CASCADE") })
	db, err := sql.Open("pgx", base+"?search_path="+schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	drv, err := outboxpgx.NewStdlib(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	return setup(t, "postgres", db, drv, drv.Migrate, "SELECT count(*) FROM outbox WHERE msg_id = $1")
}

// mysql makes a database of its own on the test MariaDB server.
func mysql(t *testing.T) *database {
	t.Helper()
	const params = "?parseTime=true&loc=UTC&interpolateParams=true"
	server := env("OUTBOX_TEST_MYSQL_SERVER", "root@tcp(127.0.0.1:3306)/")
	admin, err := sql.Open("mysql", server+params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	name := fmt.Sprintf("datalayers_%d", time.Now().UnixNano())
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("MariaDB at %s: %v", server, err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE " + name) })
	db, err := sql.Open("mysql", server+name+params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	drv, err := outboxmysql.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	return setup(t, "mysql", db, drv, drv.Migrate, "SELECT count(*) FROM outbox WHERE msg_id = ?")
}

func setup(t *testing.T, name string, db *sql.DB, drv outboxdriver.Driver[*sql.Tx], migrate func(context.Context) error, count string) *database {
	t.Helper()
	ctx := context.Background()
	if err := migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id BIGINT PRIMARY KEY, amount BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return &database{name: name, db: db, writer: w, count: count}
}

// check places order 1, which must commit with its message, then order 2,
// whose msg_id is already in the outbox: the writer's ErrDuplicate must roll
// the order back with it, which proves that both ran in one transaction.
func check(t *testing.T, d *database, place func(context.Context, datalayers.Order) error) {
	t.Helper()
	ctx := context.Background()
	if err := place(ctx, datalayers.Order{ID: 1, Amount: 1999}); err != nil {
		t.Fatalf("%s: place order 1: %v", d.name, err)
	}
	if n := d.rows(t, "order-1:OrderPlaced", 1); n != 1 {
		t.Fatalf("%s: order 1 committed with %d messages, want 1", d.name, n)
	}

	// The message of order 2 exists already (written on its own).
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.writer.Write(ctx, tx, outbox.Message{MsgID: "order-2:OrderPlaced", Topic: "order.placed", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	err = place(ctx, datalayers.Order{ID: 2, Amount: 500})
	if !errors.Is(err, outbox.ErrDuplicate) {
		t.Fatalf("%s: place order 2 over an existing msg_id: %v, want outbox.ErrDuplicate", d.name, err)
	}
	if n := d.rows(t, "order-2:OrderPlaced", 2); n != 1 {
		t.Fatalf("%s: %d messages for order 2, want the one written before", d.name, n)
	}
}

// rows returns how many outbox rows hold msgID, and fails unless the orders
// table holds order 1 (committed) and not order 2 (rolled back).
func (d *database) rows(t *testing.T, msgID string, id int64) int {
	t.Helper()
	var n, orders int
	if err := d.db.QueryRow(d.count, msgID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	q := "SELECT count(*) FROM orders WHERE id = $1"
	if d.name == "mysql" {
		q = "SELECT count(*) FROM orders WHERE id = ?"
	}
	if err := d.db.QueryRow(q, id).Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if want := map[int64]int{1: 1, 2: 0}[id]; orders != want {
		t.Fatalf("%s: orders holds %d rows with id %d, want %d", d.name, orders, id, want)
	}
	return n
}

var databases = map[string]func(*testing.T) *database{"postgres": postgres, "mysql": mysql}

func TestSQLX(t *testing.T) {
	for name, open := range databases {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			driverName, insert := "pgx", "INSERT INTO orders (id, amount) VALUES (:id, :amount)"
			if name == "mysql" {
				driverName = "mysql"
			}
			db := sqlx.NewDb(d.db, driverName)
			check(t, d, func(ctx context.Context, o datalayers.Order) error {
				return datalayers.PlaceOrderSQLX(ctx, db, d.writer, insert, o)
			})
		})
	}
}

func TestGORM(t *testing.T) {
	for name, open := range databases {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			dialector := gormpostgres.New(gormpostgres.Config{Conn: d.db})
			if name == "mysql" {
				dialector = gormmysql.New(gormmysql.Config{Conn: d.db, SkipInitializeWithVersion: true})
			}
			db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
			if err != nil {
				t.Fatal(err)
			}
			check(t, d, func(ctx context.Context, o datalayers.Order) error {
				return datalayers.PlaceOrderGORM(ctx, db, d.writer, o)
			})
			if _, err := datalayers.GORMTx(db); err == nil {
				t.Fatal("GORMTx outside a transaction: no error")
			}
		})
	}
}

func TestBun(t *testing.T) {
	for name, open := range databases {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			db := bun.NewDB(d.db, pgdialect.New())
			if name == "mysql" {
				db = bun.NewDB(d.db, mysqldialect.New())
			}
			check(t, d, func(ctx context.Context, o datalayers.Order) error {
				return datalayers.PlaceOrderBun(ctx, db, d.writer, o)
			})
		})
	}
}

func TestEnt(t *testing.T) {
	for name, open := range databases {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			entDialect := dialect.Postgres
			if name == "mysql" {
				entDialect = dialect.MySQL
			}
			check(t, d, func(ctx context.Context, o datalayers.Order) error {
				return datalayers.PlaceOrderEnt(ctx, d.db, entDialect, d.writer, o)
			})
		})
	}
}

func TestSQLC(t *testing.T) {
	for name, open := range databases {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			check(t, d, func(ctx context.Context, o datalayers.Order) error {
				if name == "mysql" {
					return datalayers.PlaceOrderSQLCMySQL(ctx, d.db, ordersmysql.New(d.db), d.writer, o)
				}
				return datalayers.PlaceOrderSQLC(ctx, d.db, orderspg.New(d.db), d.writer, o)
			})
		})
	}
}
