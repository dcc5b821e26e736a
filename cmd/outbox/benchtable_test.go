package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A shell set up for the relay exports its database, tables and broker;
// bench and demo read none of them, so that neither empties the relay's
// tables nor publishes made-up events to its broker.
func TestBenchAndDemoIgnoreTheRelaysVariables(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn, "--table", "clitest_prod", "--inbox-table", "clitest_prod_inbox")
	b.exec(t, "INSERT INTO clitest_prod (msg_id, topic, payload) VALUES (?, ?, ?)", "order-1:paid", "order.paid", `{}`)
	b.exec(t, "INSERT INTO clitest_prod_inbox (consumer_group, msg_id) VALUES (?, ?)", "points", "order-0:paid")
	relayEnv := []string{"OUTBOX_DB=" + b.dsn, "OUTBOX_TABLE=clitest_prod", "OUTBOX_INBOX_TABLE=clitest_prod_inbox",
		"OUTBOX_BROKER=" + srv.URL + "/events", "OUTBOX_FORCE=true", "OUTBOX_MESSAGES=abc"}

	// Without --db on the command line bench has no database: OUTBOX_DB
	// does not count.
	r := runCLI(t, relayEnv, "bench")
	checkError(t, r, 2, "bench: missing --db: ")
	if strings.Contains(r.stderr, "OUTBOX_DB") {
		t.Errorf("bench's missing --db names OUTBOX_DB, which it does not read:\n%s", r)
	}

	// With --db given, bench works on its own table and discards.
	r = runCLI(t, relayEnv, "bench", "--db", b.dsn, "--messages", "200")
	if r.code != 0 || !strings.Contains(r.stdout, "broker discard:") {
		t.Fatalf("bench with the relay's variables: %s", r)
	}
	if n := b.queryInt(t, "SELECT count(*) FROM clitest_prod WHERE msg_id = 'order-1:paid'"); n != 1 {
		t.Errorf("bench emptied the relay's table named in OUTBOX_TABLE")
	}
	if n := b.queryInt(t, "SELECT count(*) FROM clitest_prod_inbox"); n != 1 {
		t.Errorf("bench emptied the inbox table named in OUTBOX_INBOX_TABLE")
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("bench published %d requests to the broker named in OUTBOX_BROKER", n)
	}

	// The demo needs no set-up and takes none from the environment.
	r = runCLI(t, []string{"OUTBOX_BROKER=https://prod.example/events", "OUTBOX_LANG=fr"}, "demo", "--lang", "en")
	if r.code != 0 || !strings.Contains(r.stdout, "published") {
		t.Fatalf("demo with OUTBOX_BROKER set: %s", r)
	}

	for _, cmd := range []string{"bench", "demo"} {
		r := mustRun(t, cmd, "--help")
		if strings.Contains(r.stdout, "env OUTBOX_") || !strings.Contains(r.stdout, "reads no OUTBOX_ variable") {
			t.Errorf("%s --help should say that it reads no variable:\n%s", cmd, r.stdout)
		}
	}
	if r := mustRun(t, "help"); !strings.Contains(r.stdout, "demo and bench read no variable") {
		t.Errorf("outbox help does not say that demo and bench read no variable:\n%s", r.stdout)
	}
	if r := mustRun(t, "bench", "--help"); !strings.Contains(r.stdout, "--force") {
		t.Errorf("bench --help does not document --force:\n%s", r.stdout)
	}
}

// bench empties its table before the first run; it refuses a table that
// holds rows it did not write unless --force says to empty it anyway, and
// accepts the rows a previous bench run left.
func TestBenchRefusesATableOfOtherRows(t *testing.T) {
	t.Parallel()
	eachBackend(t, false, func(t *testing.T, b *backend) {
		prod := []string{"--db", b.dsn, "--table", "clitest_prod", "--inbox-table", "clitest_prod_inbox"}
		mustRun(t, append([]string{"migrate"}, prod...)...)
		b.exec(t, "INSERT INTO clitest_prod (msg_id, topic, payload) VALUES (?, ?, ?)", "order-1:paid", "order.paid", `{}`)
		bench := func(args ...string) result {
			return runCLI(t, nil, append([]string{"bench", "--messages", "100", "--batch", "50"}, args...)...)
		}

		r := bench(prod...)
		checkError(t, r, 2, `table "clitest_prod" holds rows bench did not write (msg_id "order-1:paid", topic "order.paid")`,
			"--table", "--force", "outbox bench --help")
		if n := b.queryInt(t, "SELECT count(*) FROM clitest_prod"); n != 1 {
			t.Fatalf("bench refused, yet the table has %d rows, want 1", n)
		}

		// A table a previous bench run left (--keep) is bench's own, and so
		// is one with the rows of a bench before msg_ids had a prefix.
		own := []string{"--db", b.dsn, "--table", "clitest_bench", "--inbox-table", "clitest_bench_inbox"}
		if r := bench(append(own, "--keep")...); r.code != 0 {
			t.Fatalf("bench --keep: %s", r)
		}
		if n := b.queryInt(t, "SELECT count(*) FROM clitest_bench WHERE msg_id LIKE 'outbox-bench-%'"); n != 100 {
			t.Fatalf("bench --keep left %d rows of its own, want 100", n)
		}
		b.exec(t, "INSERT INTO clitest_bench (msg_id, topic, payload) VALUES (?, ?, ?)", "0a1b2c3d-1-7", "bench.event", `{}`)
		if r := bench(own...); r.code != 0 {
			t.Fatalf("bench on a table of its own from a previous run: %s", r)
		}
		if n := b.queryInt(t, "SELECT count(*) FROM clitest_bench"); n != 0 {
			t.Errorf("bench left %d rows, want 0", n)
		}

		// --force empties the table anyway.
		if r := bench(append(prod, "--force")...); r.code != 0 {
			t.Fatalf("bench --force: %s", r)
		}
		if n := b.queryInt(t, "SELECT count(*) FROM clitest_prod"); n != 0 {
			t.Errorf("bench --force left %d rows, want 0", n)
		}

		// PostgreSQL's bench empties the inbox table as well; bench writes
		// no row there, so any row is someone else's.
		b.exec(t, "INSERT INTO clitest_prod_inbox (consumer_group, msg_id) VALUES (?, ?)", "points", "order-0:paid")
		r = bench(prod...)
		if b.name == "postgres" {
			checkError(t, r, 2, `table "clitest_prod_inbox" holds rows bench did not write (consumer group "points", msg_id "order-0:paid")`,
				"--inbox-table", "--force")
		} else if r.code != 0 {
			t.Fatalf("bench with a row in an inbox table it does not empty: %s", r)
		}
		if n := b.queryInt(t, "SELECT count(*) FROM clitest_prod_inbox"); n != 1 {
			t.Errorf("the inbox table has %d rows, want 1", n)
		}
	})
}
