package outboxsqlite

import (
	"context"
	"database/sql/driver"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// busyTimeout is how long a writer waits for SQLite's write lock, and for
// the write gate, before it goes on without it.
const busyTimeout = 10 * time.Second

// OpenOption changes how Open opens the database.
type OpenOption func(*openOptions)

type openOptions struct {
	writeGate bool
}

// WriteGate turns the in-process write gate on or off; it is on by
// default. With the gate, the writers of one database file in this process
// take turns in Go, in the order they arrive, instead of polling SQLite's
// lock in its busy handler, which sleeps between tries and so lets the
// lock sit idle.
//
// The gate is taken where SQLite's write lock is taken, and given back
// where the lock is:
//
//   - a transaction that is not ReadOnly takes it before its BEGIN
//     IMMEDIATE and gives it back at Commit or Rollback;
//   - a statement run with Exec outside a transaction that begins with
//     INSERT, UPDATE, DELETE or REPLACE takes it for that statement.
//
// Everything else passes it by and meets SQLite's lock as before: reads,
// ReadOnly transactions, statements inside a transaction, prepared
// statements, and a transaction begun with a BEGIN or SAVEPOINT statement,
// until its COMMIT, END or ROLLBACK. Writers in other processes meet the
// busy timeout only.
//
// The gate is not reentrant. A goroutine that holds a write transaction and
// meanwhile writes through the *sql.DB outside it (a second write
// transaction, or an INSERT with db.Exec) waits for itself: it waits the
// busy timeout for the gate, then goes on to SQLite's lock, which the first
// transaction holds, and fails with SQLITE_BUSY after the busy timeout
// again, where without the gate it fails after one. Reads through the
// *sql.DB, and ReadOnly transactions, never wait for the gate. A writer
// whose context ends while it waits for the gate returns the context's
// error.
//
// The gate waits after database/sql has given the writer a connection. With
// db.SetMaxOpenConns, a transaction that needs a second connection while
// every other one waits for the gate gets it once those waits reach the
// busy timeout and fail.
func WriteGate(enabled bool) OpenOption {
	return func(o *openOptions) { o.writeGate = enabled }
}

// writeGate queues the writers of one database file in this process: a
// channel of one slot, whose waiting senders Go serves in order.
type writeGate struct {
	slot chan struct{}
	wait time.Duration // how long a writer waits for the slot
	key  string
	refs int // connectors on the gate, under gatesMu

	// The gated connections have the WAL checkpointed (checkpointer) after
	// they have given the gate back: SQLite's automatic checkpoint runs
	// inside the COMMIT, which would keep the gate for as long as it copies
	// and syncs.
	// As for SQLite's, a checkpoint is due after each write while the WAL
	// holds autoCheckpointPages frames or more: the wal-index header's
	// mxFrame, read from the -shm file. The WAL starts again from its
	// beginning at the first write after a checkpoint has copied it all.
	shmMu    sync.Mutex
	shm      *os.File
	shmFails int
}

// autoCheckpointPages is the WAL's size, in frames, at which a checkpoint is
// due.
const autoCheckpointPages = 10000

// walFrames returns the number of frames in the WAL. Where the -shm file
// cannot be read, one call in a thousand returns autoCheckpointPages, so
// that the WAL still does not grow without end, and the others 0.
func (g *writeGate) walFrames() uint32 {
	g.shmMu.Lock()
	defer g.shmMu.Unlock()
	var b [4]byte
	err := os.ErrNotExist
	if g.shm == nil {
		g.shm, err = os.Open(g.key + "-shm")
		if err != nil {
			g.shm = nil
		}
	}
	if g.shm != nil {
		// The wal-index header, in native byte order: mxFrame at offset
		// 16 (see https://www.sqlite.org/walformat.html).
		_, err = g.shm.ReadAt(b[:], 16)
	}
	if err != nil {
		if g.shmFails++; g.shmFails%1000 == 0 {
			return autoCheckpointPages
		}
		return 0
	}
	return binary.NativeEndian.Uint32(b[:])
}

func (g *writeGate) closeShm() {
	g.shmMu.Lock()
	defer g.shmMu.Unlock()
	if g.shm != nil {
		g.shm.Close()
		g.shm = nil
	}
}

var (
	gatesMu sync.Mutex
	gates   = map[string]*writeGate{}
)

// gateKey returns the key of the database at path, its absolute path, or ""
// for no gate: for an in-memory database, in which each connection is a
// database of its own, and for a "file:" URI, whose file it does not parse.
func gateKey(path string) string {
	if path == ":memory:" || strings.Contains(path, "mode=memory") {
		return ""
	}
	if strings.HasPrefix(path, "file:") {
		return ""
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// openGate returns the gate of key, shared by every *sql.DB of this process
// that Open opened on the file; closeGate gives it back.
func openGate(key string) *writeGate {
	gatesMu.Lock()
	defer gatesMu.Unlock()
	g := gates[key]
	if g == nil {
		g = &writeGate{slot: make(chan struct{}, 1), wait: busyTimeout, key: key}
		gates[key] = g
	}
	g.refs++
	return g
}

func closeGate(g *writeGate) {
	gatesMu.Lock()
	defer gatesMu.Unlock()
	if g.refs--; g.refs == 0 {
		delete(gates, g.key)
		g.closeShm()
	}
}

// lock takes the gate. held is false when the writer waited g.wait without
// getting it: it goes on to SQLite's own lock then. err is ctx's error when
// ctx ended first.
func (g *writeGate) lock(ctx context.Context) (held bool, err error) {
	select {
	case g.slot <- struct{}{}:
		return true, nil
	default:
	}
	t := time.NewTimer(g.wait)
	defer t.Stop()
	select {
	case g.slot <- struct{}{}:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
		return false, nil
	}
}

func (g *writeGate) unlock() { <-g.slot }

// gatedConnector opens the driver's connections with the gate around them.
type gatedConnector struct {
	driver.Connector
	gate  *writeGate
	cp    *checkpointer
	close sync.Once
}

func (c *gatedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return newGatedConn(dc, c.gate, c.cp), nil
}

// Close stops the checkpointer and gives the gate back; sql.DB.Close calls
// it.
func (c *gatedConnector) Close() error {
	c.close.Do(func() {
		c.cp.close()
		closeGate(c.gate)
	})
	return nil
}

// sqliteConn is what every connection of modernc.org/sqlite implements.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// gatedConn is a connection that takes the gate for its writes. database/sql
// uses a connection from one goroutine at a time, so its state needs no lock.
type gatedConn struct {
	sqliteConn
	gate   *writeGate
	cp     *checkpointer
	tx     *gatedTx // the open transaction begun with BeginTx
	manual bool     // in a transaction begun with a BEGIN or SAVEPOINT statement
}

func newGatedConn(dc driver.Conn, g *writeGate, cp *checkpointer) driver.Conn {
	sc, ok := dc.(sqliteConn)
	if !ok {
		return dc // not a connection the gate knows how to wrap
	}
	return &gatedConn{sqliteConn: sc, gate: g, cp: cp}
}

// Unwrap returns the driver's connection, for conn.Raw and sqlite.Limit.
func (c *gatedConn) Unwrap() driver.Conn { return c.sqliteConn }

func (c *gatedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *gatedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	held := false
	if !opts.ReadOnly && !c.manual {
		var err error
		if held, err = c.gate.lock(ctx); err != nil {
			return nil, err
		}
	}
	tx, err := c.sqliteConn.BeginTx(ctx, opts)
	if err != nil {
		if held {
			c.gate.unlock()
		}
		return nil, err
	}
	c.tx = &gatedTx{Tx: tx, c: c, held: held}
	return c.tx, nil
}

func (c *gatedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.tx != nil {
		return c.sqliteConn.ExecContext(ctx, query, args)
	}
	kw := firstKeywords(query)
	r, err := c.exec(ctx, query, args, kw)
	c.track(kw, err)
	if err == nil && !c.manual {
		c.checkpoint()
	}
	return r, err
}

// exec runs query, holding the gate when it is a write outside a
// transaction.
func (c *gatedConn) exec(ctx context.Context, query string, args []driver.NamedValue, kw [3]string) (driver.Result, error) {
	if !c.manual {
		switch kw[0] {
		case "INSERT", "UPDATE", "DELETE", "REPLACE":
			held, err := c.gate.lock(ctx)
			if err != nil {
				return nil, err
			}
			if held {
				defer c.gate.unlock()
			}
		}
	}
	return c.sqliteConn.ExecContext(ctx, query, args)
}

// checkpoint has the WAL checkpointed when a checkpoint is due, after the
// gate is given back, so that the other writers go on meanwhile: by the
// checkpointer, or here when the WAL has grown to inlineCheckpointPages.
// Its error is of no concern to the statement before it.
func (c *gatedConn) checkpoint() {
	switch n := c.gate.walFrames(); {
	case n >= inlineCheckpointPages:
		c.cp.inline(c.sqliteConn)
	case n >= autoCheckpointPages:
		c.cp.request()
	}
}

// ResetSession has the WAL checkpointed when a checkpoint is due, for the
// writes that passed the gate by, before database/sql hands the connection
// out again.
func (c *gatedConn) ResetSession(ctx context.Context) error {
	if err := c.sqliteConn.ResetSession(ctx); err != nil {
		return err
	}
	if c.tx == nil && !c.manual {
		c.checkpoint()
	}
	return nil
}

func (c *gatedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.tx != nil {
		return c.sqliteConn.QueryContext(ctx, query, args)
	}
	r, err := c.sqliteConn.QueryContext(ctx, query, args)
	c.track(firstKeywords(query), err)
	return r, err
}

// track follows a transaction begun and ended with statements, which the
// gate passes by. A RELEASE that ends the transaction is not seen: the
// connection then passes the gate by until its next COMMIT or ROLLBACK,
// which is how it behaves without the gate.
func (c *gatedConn) track(kw [3]string, err error) {
	switch kw[0] {
	case "BEGIN", "SAVEPOINT":
		if err == nil {
			c.manual = true
		}
	case "COMMIT", "END":
		if err == nil {
			c.manual = false
		}
	case "ROLLBACK":
		if err == nil && kw[1] != "TO" && kw[2] != "TO" { // ROLLBACK [TRANSACTION] TO keeps the transaction
			c.manual = false
		}
	}
}

func (c *gatedConn) Close() error {
	if c.tx != nil {
		c.tx.done()
	}
	return c.sqliteConn.Close()
}

// gatedTx gives the gate back when the transaction ends.
type gatedTx struct {
	driver.Tx
	c    *gatedConn
	held bool
}

func (t *gatedTx) Commit() error {
	err := t.Tx.Commit()
	t.done()
	if err == nil {
		t.c.checkpoint()
	}
	return err
}

func (t *gatedTx) Rollback() error {
	defer t.done()
	return t.Tx.Rollback()
}

func (t *gatedTx) done() {
	if t.c.tx == t {
		t.c.tx = nil
	}
	if t.held {
		t.held = false
		t.c.gate.unlock()
	}
}

// firstKeywords returns the first three words of query in upper case,
// past white space and comments.
func firstKeywords(query string) (kw [3]string) {
	s := query
	for i := range kw {
		s = skipSpace(s)
		n := 0
		for n < len(s) && n < 16 && (s[n]|0x20 >= 'a' && s[n]|0x20 <= 'z') {
			n++
		}
		if n == 0 {
			return kw
		}
		kw[i] = strings.ToUpper(s[:n])
		s = s[n:]
	}
	return kw
}

func skipSpace(s string) string {
	for {
		s = strings.TrimLeft(s, " \t\r\n\f(")
		switch {
		case strings.HasPrefix(s, "--"):
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				s = s[i+1:]
			} else {
				return ""
			}
		case strings.HasPrefix(s, "/*"):
			if i := strings.Index(s[2:], "*/"); i >= 0 {
				s = s[2+i+2:]
			} else {
				return ""
			}
		default:
			return s
		}
	}
}
