package outboxmysql_test

import (
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"log"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
)

// TLS to MariaDB or MySQL with a CA of one's own and a client certificate
// is the driver's configuration: the outbox uses the *sql.DB it is given.
// A mysql.Config whose TLS field is set requires TLS: a server without it
// is refused (mysql.ErrNoTLS), never used in plain text, unless
// AllowFallbackToPlaintext is set.
func Example_tls() {
	pem, err := os.ReadFile("/etc/outbox/tls/ca.crt")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		log.Fatal("ca.crt holds no PEM certificate")
	}
	client, err := tls.LoadX509KeyPair("/etc/outbox/tls/client.crt", "/etc/outbox/tls/client.key")
	if err != nil {
		log.Fatal(err)
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.DBName, cfg.User = "tcp", "db.example.internal:3306", "app", "app"
	cfg.Passwd = os.Getenv("APP_DB_PASSWORD")
	cfg.ParseTime, cfg.Loc, cfg.InterpolateParams = true, time.UTC, true
	cfg.TLS = &tls.Config{
		RootCAs:      roots,
		Certificates: []tls.Certificate{client},
		ServerName:   "db.example.internal", // the name in the server's certificate
		MinVersion:   tls.VersionTLS12,
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		log.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	drv, err := outboxmysql.New(db, outbox.Tables{})
	if err != nil {
		log.Fatal(err)
	}
	_ = drv // outbox.NewWriter(drv), outbox.NewRelay(drv, publisher, config)
}
