package outboxpgx_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxpgx"
)

// TLS to PostgreSQL is the pool's own configuration: the driver uses the
// pool it is given. sslmode=verify-full checks the server's certificate
// against sslrootcert and its name against the host; sslcert and sslkey are
// the client's certificate, for pg_hba.conf's "cert" method. pgx never falls
// back to plain text with verify-full, verify-ca or require.
func Example_tls() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig("postgres://app@db.example.internal:5432/app?sslmode=verify-full" +
		"&sslrootcert=/etc/outbox/tls/ca.crt&sslcert=/etc/outbox/tls/client.crt&sslkey=/etc/outbox/tls/client.key")
	if err != nil {
		log.Fatal(err)
	}
	// cfg.ConnConfig.TLSConfig is a *tls.Config and may be changed here,
	// e.g. its ServerName when the certificate names another host.
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	drv, err := outboxpgx.New(pool, outbox.Tables{})
	if err != nil {
		log.Fatal(err)
	}
	_ = drv // outbox.NewWriter(drv), outbox.NewRelay(drv, publisher, config)
}
