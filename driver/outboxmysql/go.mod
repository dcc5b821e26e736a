module github.com/outbox-go/outbox/driver/outboxmysql

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.1
	github.com/outbox-go/outbox v0.3.0
	go.uber.org/goleak v1.3.0
)

require filippo.io/edwards25519 v1.2.0 // indirect
