module github.com/outbox-go/outbox/cmd/outbox

go 1.26

require (
	github.com/outbox-go/outbox v0.0.0-00010101000000-000000000000
	github.com/outbox-go/outbox/driver/outboxmysql v0.0.0-00010101000000-000000000000
	github.com/outbox-go/outbox/driver/outboxpgx v0.0.0-00010101000000-000000000000
	github.com/outbox-go/outbox/driver/outboxsqlite v0.0.0-00010101000000-000000000000
)

replace (
	github.com/outbox-go/outbox => ../..
	github.com/outbox-go/outbox/driver/outboxmysql => ../../driver/outboxmysql
	github.com/outbox-go/outbox/driver/outboxpgx => ../../driver/outboxpgx
	github.com/outbox-go/outbox/driver/outboxsqlite => ../../driver/outboxsqlite
)
