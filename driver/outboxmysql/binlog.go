package outboxmysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// BinlogConfig says how a BinlogDriver reads the server's binary log.
type BinlogConfig struct {
	// Conn is the connection of the user that reads the binary log, as
	// mysql.ParseDSN returns it (usually the one the driver's *sql.DB was
	// opened with): Net ("tcp" or "unix"), Addr, User, Passwd, TLS, and
	// DBName, the database of the outbox table unless its name has a
	// schema. Required.
	Conn *mysql.Config
	// MaxBatch bounds the messages Stream hands to one call of its fn,
	// which always gets whole transactions: a transaction with more rows
	// comes alone. Defaults to 1000.
	MaxBatch int
}

// defaultMaxBatch is BinlogConfig.MaxBatch's default.
const defaultMaxBatch = 1000

// WithDefaults returns cfg with zero fields defaulted.
func (cfg BinlogConfig) WithDefaults() BinlogConfig {
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = defaultMaxBatch
	}
	return cfg
}

func (cfg BinlogConfig) validate() error {
	switch {
	case cfg.Conn == nil:
		return errors.New("outboxmysql: binlog: Conn is nil: pass the reader's connection settings (mysql.ParseDSN)")
	case cfg.Conn.Net != "tcp" && cfg.Conn.Net != "unix":
		return fmt.Errorf("outboxmysql: binlog: Conn.Net is %q: the binary log is read over tcp or unix", cfg.Conn.Net)
	case cfg.MaxBatch < 0:
		return fmt.Errorf("outboxmysql: binlog: MaxBatch %d must not be negative", cfg.MaxBatch)
	}
	return nil
}

// BinlogPosition is a position in the server's binary log: a file and the
// byte offset in it.
type BinlogPosition struct {
	File   string
	Offset uint32
}

// String returns the position as file:offset.
func (p BinlogPosition) String() string { return fmt.Sprintf("%s:%d", p.File, p.Offset) }

// IsZero reports whether p is no position.
func (p BinlogPosition) IsZero() bool { return p.File == "" }

// BinlogDriver is a Driver that also reads the outbox table's inserts from
// the server's binary log, as a replica would: it implements
// outboxdriver.Streamer, and outboxdriver.Watcher so that a polling relay looks for
// rows within milliseconds of any writer's commit. Each reader registers
// with the server under a server_id of its own, drawn at random.
//
// The server must write its binary log (log_bin) in ROW format with full
// row images (binlog_format=ROW, binlog_row_image=FULL), and the user needs
// REPLICATION SLAVE and REPLICATION CLIENT (MariaDB 10.5 and later:
// REPLICATION SLAVE and BINLOG MONITOR) on *.*. Otherwise Stream and Watch
// return an error matching outboxdriver.ErrStreamUnavailable that says what to
// change. The table's column order is read from information_schema when a
// reader starts, so binlog_row_metadata may stay at its default.
type BinlogDriver struct {
	*Driver
	cfg    BinlogConfig
	db     *sql.DB // the binlog user's connections, for the checks and the lag
	schema string
	table  string

	mu        sync.Mutex
	streaming bool
	confirmed BinlogPosition
	lag       lagState // of the Stream running now
}

var (
	_ outboxdriver.Streamer        = (*BinlogDriver)(nil)
	_ outboxdriver.StreamLagger    = (*BinlogDriver)(nil)
	_ outboxdriver.Watcher         = (*BinlogDriver)(nil)
	_ outboxdriver.Driver[*sql.Tx] = (*BinlogDriver)(nil)
)

// WithBinlog returns d reading the binary log as cfg says. Close releases
// the connections it opens for its checks; d itself stays open.
func (d *Driver) WithBinlog(cfg BinlogConfig) (*BinlogDriver, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	schema, table, _ := outboxdriver.SplitTableName(d.Tables().Outbox)
	if schema == "" {
		schema = cfg.Conn.DBName
	}
	if schema == "" {
		return nil, fmt.Errorf("outboxmysql: binlog: Conn names no database and the outbox table %q no schema: set Conn.DBName", table)
	}
	conn := cfg.Conn.Clone()
	conn.ParseTime = true
	connector, err := mysql.NewConnector(conn)
	if err != nil {
		return nil, fmt.Errorf("outboxmysql: binlog: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxIdleConns(1)
	db.SetMaxOpenConns(3) // the stream's lock, a check, and Watch's or BinlogLag's
	return &BinlogDriver{Driver: d, cfg: cfg, db: db, schema: schema, table: table}, nil
}

// Close closes the connections the BinlogDriver opened itself. A Stream or
// Watch still running should be ended first, through its context.
func (b *BinlogDriver) Close() error { return b.db.Close() }

// Stream implements outboxdriver.Streamer. The first Stream starts at the
// server's position when it starts; a later one resumes after the last
// transaction a Stream of b confirmed (see Confirmed). It returns nil when
// ctx ends.
//
// One Stream per outbox table runs at a time, across processes: a Stream
// holds the named lock LockName (GET_LOCK) on a connection of its own
// until it ends, and while another holds it, Stream returns an error
// matching outboxdriver.ErrStreamBusy at once. A second Stream of the same
// BinlogDriver gets that error too.
func (b *BinlogDriver) Stream(ctx context.Context, fn func(context.Context, []outbox.Message) error) error {
	return b.StreamFrom(ctx, BinlogPosition{}, fn)
}

// StreamFrom is Stream from position from, which must be a transaction's
// boundary such as Confirmed returns; the zero position is Stream's start.
func (b *BinlogDriver) StreamFrom(ctx context.Context, from BinlogPosition, fn func(context.Context, []outbox.Message) error) error {
	b.mu.Lock()
	if b.streaming {
		b.mu.Unlock()
		return fmt.Errorf("%w: a Stream of this BinlogDriver is already running", outboxdriver.ErrStreamBusy)
	}
	b.streaming = true
	if from.IsZero() {
		from = b.confirmed
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.streaming = false
		b.mu.Unlock()
	}()
	return b.stream(ctx, from, fn)
}

// Confirmed returns the position after the last transaction that a Stream
// of b handed to fn, and fn accepted, or passed over because it wrote no
// outbox row: a Stream from it misses no later transaction. It is the zero
// position before the first Stream started.
func (b *BinlogDriver) Confirmed() BinlogPosition {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.confirmed
}

func (b *BinlogDriver) confirm(p BinlogPosition, lin int64) {
	b.mu.Lock()
	b.confirmed = p
	b.lag.confirmed = lin
	b.lag.oldest = time.Time{}
	b.mu.Unlock()
}

// Watch implements outboxdriver.Watcher: it reads the binary log from the
// server's position when it starts and calls fn with Change{Via: "binlog"}
// after every transaction that inserted into the outbox table, whoever
// wrote it.
func (b *BinlogDriver) Watch(ctx context.Context, fn func(outboxdriver.Change)) error {
	return b.watch(ctx, fn)
}

// ServerPosition returns the server's current binary log position (SHOW
// MASTER STATUS, or SHOW BINARY LOG STATUS on MySQL 8.4 and later).
func (b *BinlogDriver) ServerPosition(ctx context.Context) (BinlogPosition, error) {
	return b.serverPosition(ctx)
}

// newServerID draws a server_id for one reader: above 2^16, so that it
// stays clear of the small ids operators give their servers, and not the
// server's own.
func newServerID(server uint32) uint32 {
	for {
		var buf [4]byte
		_, _ = rand.Read(buf[:])
		id := binary.BigEndian.Uint32(buf[:]) | 1<<16
		if id != server {
			return id
		}
	}
}
