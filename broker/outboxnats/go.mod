module github.com/outbox-go/outbox/broker/outboxnats

go 1.26.0

require (
	github.com/nats-io/nats.go v1.55.0
	github.com/outbox-go/outbox v0.3.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nkeys v0.4.16
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
