module github.com/outbox-go/outbox/broker/outboxamqp

go 1.26.0

require (
	github.com/outbox-go/outbox v0.3.0
	github.com/rabbitmq/amqp091-go v1.16.0
	go.uber.org/goleak v1.3.0
)
