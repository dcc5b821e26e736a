package relaycmd

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"log/slog"
	"time"
)

// RunConsole runs `outbox console` with args until ctx ends. It prints the
// help on stdout and logs on stderr.
func RunConsole(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := cli.NewFlagSet("outbox console", "--db DSN --addr ADDR [flags]",
		"Serve the operator's web console of an outbox table at http://ADDR/ (and the JSON admin API at\n"+
			"http://ADDR/admin/), for a team that runs the relay as a library: the backlog now and over the last\n"+
			"hour per topic, the DEAD messages (search, show, and with --admin-writable retry and drop), and the\n"+
			"failure groups. 'outbox relay --admin-addr' serves the same console beside a relay. Runs until\n"+
			"SIGTERM or SIGINT. See docs/console.md.", stdout)
	db := dbopen.AddFlags(f)
	var o adminOptions
	var logFormat, logLevel string
	var every time.Duration
	f.StringVar(&o.addr, "addr", "127.0.0.1:8080", "ADDR",
		"where to listen, HOST:PORT or :PORT; an address that is not loopback needs a token, --admin-auth-header or --admin-insecure").Env = "OUTBOX_CONSOLE_ADDR"
	addAdminFlags(f, &o)
	f.DurationVar(&every, "sample-interval", 5*time.Second, "how often to sample the backlog for the console's chart, which keeps 720 samples")
	f.StringVar(&logFormat, "log-format", "text", "text|json", "log line format")
	f.StringVar(&logLevel, "log-level", "info", "LEVEL", "least important log lines shown: debug, info, warn or error")
	f.Note(fmt.Sprintf("The server holds at most %d connections and closes one that takes over %s to send its headers,\n"+
		"%s to send its request or %s to be answered; bodies are limited to 1 MiB. GET %s and GET %s answer\n"+
		"without a token.", HTTPMaxConns, HTTPReadHeaderTimeout, httpReadTimeout, httpWriteTimeout, LivenessPath, ReadinessPath))
	f.Example("outbox console --db postgres://app@127.0.0.1:5432/app")
	f.Example("OUTBOX_ADMIN_TOKEN=$(cat /run/secrets/outbox-admin) outbox console --db sqlite:app.db --addr :8080 --admin-writable")
	f.Example("outbox console --db mysql://app@db:3306/app --addr :8080 --admin-token-file /etc/outbox/admin-tokens --admin-writable")
	pos, err := f.Parse(args)
	if err != nil {
		return err
	}
	if err := cli.NoArgs(f, pos); err != nil {
		return err
	}
	bad := func(format string, args ...any) error { return cli.Usagef(f.Hint(), "console: "+format, args...) }
	if err := o.validate("addr", bad); err != nil {
		return err
	}
	if every < 100*time.Millisecond {
		return bad("--sample-interval %s is too short; give 100ms or more", every)
	}
	o.sampleEvery = every
	cli.AddSecret(o.token)
	log, err := newLogger(cli.LogWriter{W: stderr}, logFormat, logLevel)
	if err != nil {
		return cli.Usagef(f.Hint(), "%v", err)
	}
	slog.SetDefault(log)
	srv, err := listenHTTP(ctx, "addr", o.addr)
	if err != nil {
		return err
	}
	defer srv.close()
	db.DSN = dbopen.WithPoolSize(db.DSN, adminInFlight+1)
	d, err := db.Open(ctx, true)
	if err != nil {
		return err
	}
	defer d.Close()
	ready := newReadiness()
	ready.running(d.Store, nil)
	srv.serve(log, ready)
	con, err := serveAdmin(srv, d.Store, &o, log)
	if err != nil {
		return err
	}
	err = con.Run(ctx)
	srv.close()
	return err
}
