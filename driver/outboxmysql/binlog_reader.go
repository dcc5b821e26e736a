package outboxmysql

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-go/outbox"
)

// Timing of a reader's connection: the server sends a heartbeat after
// binlogHeartbeat without events, and a connection silent for
// binlogReadTimeout is taken as dead.
const (
	binlogHeartbeat   = 5 * time.Second
	binlogReadTimeout = 30 * time.Second
)

// open starts a binary log dump on server s from from, or from the
// server's position when from is zero; start is where it started.
func (b *BinlogDriver) open(s server, from BinlogPosition, decode bool) (syncer *replication.BinlogSyncer, st *replication.BinlogStreamer, start BinlogPosition, err error) {
	start = from
	if start.IsZero() {
		start = s.pos
	}
	c := b.cfg.Conn
	cfg := replication.BinlogSyncerConfig{
		ServerID:         newServerID(s.serverID),
		Flavor:           gomysql.MySQLFlavor,
		User:             c.User,
		Password:         c.Passwd,
		TLSConfig:        c.TLS,
		ParseTime:        true,
		HeartbeatPeriod:  binlogHeartbeat,
		ReadTimeout:      binlogReadTimeout,
		DisableRetrySync: true, // a new reader resumes at a transaction's boundary
		Logger:           slog.New(slog.DiscardHandler),
		EventCacheCount:  1024,
		// Rows of other tables are passed over undecoded, and the outbox
		// table's too when only watching.
		RowsEventDecodeFunc: func(e *replication.RowsEvent, data []byte) error {
			pos, err := e.DecodeHeader(data)
			if err != nil || !decode || !b.ours(e.Table) || e.Type() != replication.EnumRowsEventTypeInsert {
				return err
			}
			return e.DecodeData(pos, data)
		},
	}
	if s.mariadb {
		cfg.Flavor = gomysql.MariaDBFlavor
		// MariaDB 11.4 and later may log events without their end position.
		cfg.FillZeroLogPos = s.atLeast(11, 4)
	}
	if c.Net == "unix" {
		cfg.Host = c.Addr
	} else {
		host, port, err := net.SplitHostPort(c.Addr)
		if err != nil {
			return nil, nil, start, fmt.Errorf("outboxmysql: binlog: Conn.Addr %q: %w", c.Addr, err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, nil, start, fmt.Errorf("outboxmysql: binlog: Conn.Addr %q: bad port", c.Addr)
		}
		cfg.Host, cfg.Port = host, uint16(p)
	}
	syncer = replication.NewBinlogSyncer(cfg)
	st, err = syncer.StartSync(gomysql.Position{Name: start.File, Pos: start.Offset})
	if err != nil {
		syncer.Close()
		if isErrNumber(err, 1227) || isErrNumber(err, 1045) { // access denied
			return nil, nil, start, unavailablef("%s lacks REPLICATION SLAVE (the server refused to send its binary log: %v): %s", s.user, err, s.grants())
		}
		return nil, nil, start, fmt.Errorf("outboxmysql: binlog: start reading at %s: %w", start, err)
	}
	return syncer, st, start, nil
}

// atLeast reports whether the server's version is major.minor or later.
func (s server) atLeast(major, minor int) bool {
	return s.major > major || s.major == major && s.minor >= minor
}

// reader turns a dump's events into the transactions that commit.
type reader struct {
	b      *BinlogDriver
	decode bool // decode the outbox rows, not only count them
	cols   *columns
	file   string // the binlog file being read
	last   uint32 // the end of the last event that had one
	inTx   bool   // between a transaction's start and its end
	msgs   []outbox.Message
	rows   int

	// base+last is the reader's position as bytes of log read since the
	// start of its first file: base grows by a file's size at each
	// rotation. recv, when set, is kept at that position.
	base int64
	recv *atomic.Int64
	at   time.Time // the server's time of the last event that had one
}

// lin is the reader's position in bytes since the start of its first file.
func (r *reader) lin() int64 { return r.base + int64(r.last) }

// commit is one committed transaction: its outbox rows (msgs when
// decoding) and the position after it.
type commit struct {
	msgs []outbox.Message
	rows int
	end  BinlogPosition
	lin  int64     // end as reader.lin
	at   time.Time // the server's time of the commit
}

// pump reads events and sends each transaction's commit on out until ctx
// ends or the dump fails.
func (r *reader) pump(ctx context.Context, st *replication.BinlogStreamer, out chan<- commit) error {
	for {
		ev, err := st.GetEvent(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("outboxmysql: binlog: read at %s:%d: %w", r.file, r.last, err)
		}
		c, ok, err := r.handle(ctx, ev, ev.Header.LogPos)
		if err != nil {
			return err
		}
		if r.recv != nil {
			r.recv.Store(r.lin())
		}
		if !ok {
			continue
		}
		select {
		case out <- c:
		case <-ctx.Done():
			return nil
		}
	}
}

// handle takes one event; end is the position after it. ok says that it
// ended a transaction, c.
func (r *reader) handle(ctx context.Context, ev *replication.BinlogEvent, end uint32) (c commit, ok bool, err error) {
	if end != 0 {
		r.last = end
	}
	if ev.Header.Timestamp != 0 {
		r.at = time.Unix(int64(ev.Header.Timestamp), 0)
	}
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		if next := string(e.NextLogName); next != r.file {
			r.base += int64(r.last) // the old file ends here
			r.file = next
		}
		r.last = uint32(e.Position)
	case *replication.TransactionPayloadEvent:
		// MySQL's binlog_transaction_compression: a whole transaction.
		for _, in := range e.Events {
			ci, oki, err := r.handle(ctx, in, end)
			if err != nil {
				return c, false, err
			}
			if oki {
				c, ok = ci, true
			}
		}
		return c, ok, nil
	case *replication.RowsEvent:
		r.inTx = true
		return c, false, r.rowsEvent(ctx, e)
	case *replication.TableMapEvent:
		r.inTx = true
	case *replication.XIDEvent:
		return r.commit(), true, nil
	case *replication.QueryEvent:
		return r.query(string(e.Query))
	case *replication.GTIDEvent, *replication.MariadbGTIDEvent:
		// A transaction begins: rows without a commit before it never
		// committed as far as the log says.
		r.discard()
		r.inTx = true
	case *replication.FormatDescriptionEvent:
	default:
		switch {
		case ev.Header.EventType == replication.XA_PREPARE_LOG_EVENT:
			// An XA transaction's rows are logged when it prepares, before
			// it commits: they are left to the relay's polling.
			r.discard()
			return r.commit(), true, nil
		case !r.inTx && end != 0 && ev.Header.Flags&replication.LOG_EVENT_ARTIFICIAL_F == 0 &&
			ev.Header.EventType != replication.HEARTBEAT_EVENT && ev.Header.EventType != replication.HEARTBEAT_LOG_EVENT_V2:
			// Between transactions (a checkpoint, a GTID list): a
			// position to resume from.
			return r.commit(), true, nil
		}
	}
	return c, false, nil
}

// query takes a statement event: BEGIN opens a transaction, COMMIT ends one
// of a non-transactional table, ROLLBACK discards, and any other statement
// (DDL) commits on its own and may have changed the columns.
func (r *reader) query(q string) (commit, bool, error) {
	q = strings.TrimSpace(q)
	switch {
	case strings.EqualFold(q, "BEGIN"):
		r.inTx = true
		return commit{}, false, nil
	case strings.EqualFold(q, "COMMIT"):
		return r.commit(), true, nil
	case len(q) >= 8 && strings.EqualFold(q[:8], "ROLLBACK"),
		len(q) >= 2 && strings.EqualFold(q[:2], "XA"):
		r.discard()
		return r.commit(), true, nil
	}
	r.cols = nil
	return r.commit(), true, nil
}

// rowsEvent takes the rows of an insert into the outbox table.
func (r *reader) rowsEvent(ctx context.Context, e *replication.RowsEvent) error {
	if e.Type() != replication.EnumRowsEventTypeInsert || !r.b.ours(e.Table) {
		return nil
	}
	if !r.decode {
		r.rows++ // its rows were not decoded: at least one
		return nil
	}
	r.rows += len(e.Rows)
	cols, err := r.forTable(ctx, e.Table)
	if err != nil {
		return err
	}
	for _, row := range e.Rows {
		m, err := cols.message(row)
		if err != nil {
			return fmt.Errorf("outboxmysql: binlog: decode a row of %s.%s at %s:%d: %w", r.b.schema, r.b.table, r.file, r.last, err)
		}
		r.msgs = append(r.msgs, m)
	}
	return nil
}

// ours reports whether tm maps the outbox table.
func (b *BinlogDriver) ours(tm *replication.TableMapEvent) bool {
	return tm != nil && string(tm.Schema) == b.schema && string(tm.Table) == b.table
}

// commit ends the open transaction.
func (r *reader) commit() commit {
	c := commit{msgs: r.msgs, rows: r.rows, end: BinlogPosition{File: r.file, Offset: r.last}, lin: r.lin(), at: r.at}
	r.msgs, r.rows, r.inTx = nil, 0, false
	return c
}

func (r *reader) discard() { r.msgs, r.rows = nil, 0 }
