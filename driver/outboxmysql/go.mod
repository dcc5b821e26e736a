module github.com/outbox-go/outbox/driver/outboxmysql

go 1.26.0

require (
	github.com/go-mysql-org/go-mysql v1.14.0
	github.com/go-sql-driver/mysql v1.10.1
	github.com/outbox-go/outbox v0.3.0
	go.uber.org/goleak v1.3.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/goccy/go-json v0.10.5 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pingcap/errors v0.11.5-0.20250523034308-74f78ae071ee // indirect
	github.com/pingcap/log v1.1.1-0.20241212030209-7e3ff8601a2a // indirect
	github.com/pingcap/tidb/pkg/parser v0.0.0-20260219190905-9b9281fa8d6d // indirect
	github.com/shopspring/decimal v1.4.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.1 // indirect
	golang.org/x/text v0.43.0 // indirect
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // indirect
)
