module github.com/outbox-go/outbox/broker/outboxmqtt

go 1.26.0

require (
	github.com/eclipse/paho.golang v0.23.0
	github.com/outbox-go/outbox v0.3.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/gorilla/websocket v1.5.3 // indirect
	golang.org/x/net v0.61.0 // indirect
)
