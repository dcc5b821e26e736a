package outboxpgx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// PublicationName returns the name of the publication the stream reads:
// the outbox table's name (without its schema) with "_pub" appended, or,
// past 63 bytes, its first 40 bytes, a hash of the whole and "_pub".
func PublicationName(outboxTable string) string {
	return pgName(outboxTable, "_pub")
}

// SlotName returns the name of the temporary replication slot of the CDC
// relay's stream of outboxTable: the table's name in lower case, every
// character but a letter, a digit or '_' made '_', with "_cdc" appended
// (hashed past 63 bytes). Only one stream per name runs at a time.
func SlotName(outboxTable string) string {
	return slotName(outboxTable, "_cdc")
}

func slotName(outboxTable, suffix string) string {
	s := []byte(strings.ToLower(outboxTable))
	for i, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			s[i] = '_'
		}
	}
	return pgName(string(s), suffix)
}

func pgName(name, suffix string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 && suffix == "_pub" {
		name = name[i+1:]
	}
	if len(name)+len(suffix) <= 63 {
		return name + suffix
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s_%016x%s", name[:40], h.Sum64(), suffix)
}

var (
	_ outboxdriver.Streamer     = (*Driver)(nil)
	_ outboxdriver.StreamLagger = (*Driver)(nil)
)

// Stream implements outboxdriver.Streamer over PostgreSQL's logical replication
// with the built-in pgoutput plugin: it reads the inserts of the
// publication PublicationName (created on first use, FOR TABLE the outbox
// table WITH publish = 'insert', which needs the table's owner or a role
// with its privileges), through a TEMPORARY slot, SlotName, which the
// server drops when the connection ends: a relay that is down holds no
// WAL. The stream starts at the slot's creation; what was committed before
// is the polling's.
//
// It returns an error matching outboxdriver.ErrStreamUnavailable when wal_level
// is not logical, the role has no REPLICATION attribute, pg_hba.conf lets
// it make no replication connection, every replication slot or WAL sender
// is in use, or the publication is missing and the role may not create
// it; and one matching outboxdriver.ErrStreamBusy while another stream of the
// table holds the slot.
func (d *Driver) Stream(ctx context.Context, fn func(ctx context.Context, msgs []outbox.Message) error) error {
	s := &pgStream{d: d, slot: SlotName(d.Tables().Outbox), exclusive: true, deliver: fn}
	s.started = func() {
		d.lagMu.Lock()
		d.lag = s
		d.lagMu.Unlock()
	}
	defer func() {
		d.lagMu.Lock()
		if d.lag == s {
			d.lag = nil
		}
		d.lagMu.Unlock()
	}()
	return s.run(ctx)
}

// StreamLag implements outboxdriver.StreamLagger.
func (d *Driver) StreamLag() (outboxdriver.StreamLag, bool) {
	d.lagMu.Lock()
	s := d.lag
	d.lagMu.Unlock()
	if s == nil {
		return outboxdriver.StreamLag{}, false
	}
	return s.lagNow()
}

// pgStream is one run of a stream.
type pgStream struct {
	d         *Driver
	slot      string
	exclusive bool // the slot's name is the table's: ErrStreamBusy when taken
	deliver   func(ctx context.Context, msgs []outbox.Message) error
	// started, when set, is called once the slot exists.
	started func()

	conn *pgconn.PgConn
	rels map[uint32]*pglogrepl.RelationMessage

	mu        sync.Mutex // the position, read by lagNow
	streaming bool
	confirmed pglogrepl.LSN // the position confirmed
	walEnd    pglogrepl.LSN // the server's end of WAL, as last told
	oldest    time.Time     // commit time of the oldest pending transaction

	sendMu sync.Mutex // the connection's writes
}

// Stream settings.
const (
	statusInterval = 10 * time.Second       // standby status at least this often
	streamLinger   = 500 * time.Microsecond // waited for more commits before a batch goes
	streamBatch    = 1000                   // messages of a batch that goes without waiting
)

func unavailableErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{outboxdriver.ErrStreamUnavailable}, args...)...)
}

// preflight checks the settings that make the stream unavailable, on a
// connection of the pool, and makes sure the publication exists.
func (s *pgStream) preflight(ctx context.Context) error {
	var walLevel string
	var repl bool
	var role string
	err := s.d.pool.QueryRow(ctx, `SELECT current_setting('wal_level'), r.rolreplication OR r.rolsuper, current_user
FROM pg_roles AS r WHERE r.rolname = current_user`).Scan(&walLevel, &repl, &role)
	if err != nil {
		return fmt.Errorf("outboxpgx: stream: %w", err)
	}
	if walLevel != "logical" {
		return unavailableErr("wal_level is %s: set wal_level = logical in postgresql.conf (and max_replication_slots, max_wal_senders to at least the number of relays plus one) and restart the server", walLevel)
	}
	if !repl {
		return unavailableErr("role %s may not replicate: ALTER ROLE %s REPLICATION", role, pgx.Identifier{role}.Sanitize())
	}
	return s.ensurePublication(ctx)
}

// ensurePublication creates the publication when it is missing.
func (s *pgStream) ensurePublication(ctx context.Context) error {
	pub := PublicationName(s.d.Tables().Outbox)
	var n int
	if err := s.d.pool.QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname = $1`, pub).Scan(&n); err != nil {
		return fmt.Errorf("outboxpgx: stream: %w", err)
	}
	if n > 0 {
		return nil
	}
	table := pgx.Identifier(strings.Split(s.d.Tables().Outbox, ".")).Sanitize()
	create := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')", pgx.Identifier{pub}.Sanitize(), table)
	_, err := s.d.pool.Exec(ctx, create)
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe) && pe.Code == "42710":
		return nil // created meanwhile
	case errors.As(err, &pe) && pe.Code == "42501":
		return unavailableErr("the publication %s is missing and this role may not create it: run %s as the table's owner", pub, create)
	}
	return fmt.Errorf("outboxpgx: stream: create publication: %w", err)
}

// connect opens the replication connection and creates the slot.
func (s *pgStream) connect(ctx context.Context) (pglogrepl.LSN, error) {
	cfg := s.d.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, &cfg.Config)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "28000" || pe.Code == "53300") {
			return 0, unavailableErr("no replication connection (%s): allow one in pg_hba.conf (a line of type replication for this database's host) or raise max_wal_senders", pe.Message)
		}
		return 0, fmt.Errorf("outboxpgx: stream: connect: %w", err)
	}
	s.conn = conn
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, s.slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil {
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "42710" && s.exclusive:
			return 0, fmt.Errorf("%w: the slot %s exists", outboxdriver.ErrStreamBusy, s.slot)
		case errors.As(err, &pe) && pe.Code == "53400":
			return 0, unavailableErr("%s: raise max_replication_slots", pe.Message)
		case errors.As(err, &pe) && pe.Code == "55000":
			return 0, unavailableErr("%s", pe.Message)
		}
		return 0, fmt.Errorf("outboxpgx: stream: create slot %s: %w", s.slot, err)
	}
	return pglogrepl.ParseLSN(res.ConsistentPoint)
}

// run streams until ctx ends or the stream fails.
func (s *pgStream) run(ctx context.Context) error {
	if err := s.preflight(ctx); err != nil {
		return err
	}
	start, err := s.connect(ctx)
	if s.conn != nil {
		defer s.conn.Close(context.WithoutCancel(ctx))
	}
	if err != nil {
		return err
	}
	pub := PublicationName(s.d.Tables().Outbox)
	err = pglogrepl.StartReplication(ctx, s.conn, s.slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + strings.ReplaceAll(pub, "'", "''") + "'"}})
	if err != nil {
		return fmt.Errorf("outboxpgx: stream: start: %w", err)
	}
	s.mu.Lock()
	s.confirmed, s.walEnd, s.streaming = start, start, true
	s.mu.Unlock()
	if s.started != nil {
		s.started()
	}
	s.rels = map[uint32]*pglogrepl.RelationMessage{}
	err = s.loop(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// loop reads the stream and hands on the messages of each run of
// committed transactions.
func (s *pgStream) loop(ctx context.Context) error {
	var r txReader
	nextStatus := time.Now().Add(statusInterval)
	for {
		if time.Now().After(nextStatus) {
			if err := s.sendStatus(ctx); err != nil {
				return err
			}
			nextStatus = time.Now().Add(statusInterval)
		}
		deadline := nextStatus
		if len(r.pending) > 0 {
			deadline = time.Now().Add(streamLinger)
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		raw, err := s.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if pgconn.Timeout(err) {
				if len(r.pending) > 0 {
					if err := s.handPending(ctx, &r); err != nil {
						return err
					}
				}
				continue
			}
			return fmt.Errorf("outboxpgx: stream: %w", err)
		}
		reply, err := s.receive(ctx, raw, &r)
		if err != nil {
			return err
		}
		if reply {
			nextStatus = time.Time{}
		}
	}
}

// txReader is what loop has read of the stream and not handed on yet.
type txReader struct {
	pending    []outbox.Message // of the committed transactions not yet handed on
	pendingEnd pglogrepl.LSN
	tx         []outbox.Message // of the transaction being read
	inTx       bool
}

// handPending hands the pending messages on.
func (s *pgStream) handPending(ctx context.Context, r *txReader) error {
	if err := s.hand(ctx, r.pending, r.pendingEnd); err != nil {
		return err
	}
	r.pending = nil
	return nil
}

// receive takes in one message of the replication protocol. reply reports
// that the server asks for a status update at once.
func (s *pgStream) receive(ctx context.Context, raw pgproto3.BackendMessage, r *txReader) (reply bool, err error) {
	cd, ok := raw.(*pgproto3.CopyData)
	if !ok {
		if er, isErr := raw.(*pgproto3.ErrorResponse); isErr {
			return false, fmt.Errorf("outboxpgx: stream: %w", pgconn.ErrorResponseToPgError(er))
		}
		return false, nil
	}
	if len(cd.Data) == 0 {
		return false, nil
	}
	switch cd.Data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		return s.keepalive(cd.Data[1:], r)
	case pglogrepl.XLogDataByteID:
		return false, s.xlogData(ctx, cd.Data[1:], r)
	}
	return false, nil
}

// keepalive takes in a primary keepalive message. reply reports that the
// server asks for a status update at once.
func (s *pgStream) keepalive(data []byte, r *txReader) (reply bool, err error) {
	ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data)
	if err != nil {
		return false, fmt.Errorf("outboxpgx: stream: %w", err)
	}
	s.mu.Lock()
	s.walEnd = max(s.walEnd, ka.ServerWALEnd)
	if !r.inTx && len(r.pending) == 0 {
		// Caught up: the slot may move on past WAL of other tables.
		s.confirmed = max(s.confirmed, ka.ServerWALEnd)
	}
	s.mu.Unlock()
	return ka.ReplyRequested, nil
}

// xlogData takes in one logical replication message: it collects the
// outbox rows a transaction inserts and, at its commit, adds them to the
// pending messages, which are handed on once there are streamBatch.
func (s *pgStream) xlogData(ctx context.Context, data []byte, r *txReader) error {
	xld, err := pglogrepl.ParseXLogData(data)
	if err != nil {
		return fmt.Errorf("outboxpgx: stream: %w", err)
	}
	s.mu.Lock()
	s.walEnd = max(s.walEnd, xld.ServerWALEnd)
	s.mu.Unlock()
	msg, err := pglogrepl.Parse(xld.WALData)
	if err != nil {
		return fmt.Errorf("outboxpgx: stream: decode: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		s.rels[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		r.inTx, r.tx = true, r.tx[:0]
		s.noteOldest(m.CommitTime)
	case *pglogrepl.InsertMessage:
		om, ok, err := s.decode(m)
		if err != nil {
			return err
		}
		if ok {
			r.tx = append(r.tx, om)
		}
	case *pglogrepl.CommitMessage:
		r.inTx = false
		r.pending = append(r.pending, r.tx...)
		r.pendingEnd = m.TransactionEndLSN
		if len(r.pending) == 0 {
			s.confirm(r.pendingEnd)
		}
		if len(r.pending) >= streamBatch {
			return s.handPending(ctx, r)
		}
	}
	return nil
}

// noteOldest records the commit time of a transaction now read, when no
// earlier one is pending.
func (s *pgStream) noteOldest(t time.Time) {
	s.mu.Lock()
	if s.oldest.IsZero() {
		s.oldest = t
	}
	s.mu.Unlock()
}

// confirm moves the position confirmed to end (never back).
func (s *pgStream) confirm(end pglogrepl.LSN) {
	s.mu.Lock()
	s.confirmed = max(s.confirmed, end)
	s.oldest = time.Time{}
	s.mu.Unlock()
}

// hand calls deliver with msgs, sending the standby status while it runs
// (the server ends a connection silent for wal_sender_timeout), then
// confirms end and says so to the server at once.
func (s *pgStream) hand(ctx context.Context, msgs []outbox.Message, end pglogrepl.LSN) error {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(statusInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = s.sendStatus(ctx) // a failure shows in the next read
			}
		}
	}()
	err := s.deliver(ctx, msgs)
	close(done)
	wg.Wait()
	if err != nil {
		return err
	}
	s.confirm(end)
	return s.sendStatus(ctx)
}

// sendStatus tells the server the position confirmed.
func (s *pgStream) sendStatus(ctx context.Context) error {
	s.mu.Lock()
	pos := s.confirmed
	s.mu.Unlock()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos, WALFlushPosition: pos, WALApplyPosition: pos})
	if err != nil {
		return fmt.Errorf("outboxpgx: stream: status: %w", err)
	}
	return nil
}

// lagNow is the stream's lag.
func (s *pgStream) lagNow() (outboxdriver.StreamLag, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.streaming {
		return outboxdriver.StreamLag{}, false
	}
	lag := outboxdriver.StreamLag{Bytes: int64(max(s.walEnd, s.confirmed) - s.confirmed)}
	if !s.oldest.IsZero() {
		lag.Behind = max(time.Since(s.oldest), 0)
	}
	return lag, true
}

// decode makes an outbox message of an insert; ok is false for a row not
// NEW (inserted SENT or DEAD by hand).
func (s *pgStream) decode(m *pglogrepl.InsertMessage) (outbox.Message, bool, error) {
	rel, ok := s.rels[m.RelationID]
	if !ok {
		return outbox.Message{}, false, fmt.Errorf("outboxpgx: stream: an insert into unknown relation %d", m.RelationID)
	}
	var om outbox.Message
	status := "0"
	for i, col := range m.Tuple.Columns {
		if i >= len(rel.Columns) || col.DataType != 't' {
			continue // NULL, or a TOASTed value left unchanged
		}
		v := string(col.Data)
		var err error
		switch rel.Columns[i].Name {
		case "id":
			om.ID, err = strconv.ParseInt(v, 10, 64)
		case "msg_id":
			om.MsgID = v
		case "topic":
			om.Topic = v
		case "msg_key":
			om.Key = v
		case "payload":
			om.Payload = json.RawMessage(col.Data)
		case "headers":
			_ = json.Unmarshal(col.Data, &om.Headers) // the claim reads them again
		case "status":
			status = v
		case "retries":
			om.Retries, err = strconv.Atoi(v)
		case "created_at":
			om.CreatedAt, err = parsePGTime(v)
		case "next_retry_at":
			om.NextRetryAt, err = parsePGTime(v)
		}
		if err != nil {
			return outbox.Message{}, false, fmt.Errorf("outboxpgx: stream: column %s: %w", rel.Columns[i].Name, err)
		}
	}
	return om, status == "0" && om.ID != 0, nil
}

// parsePGTime parses a timestamptz in PostgreSQL's text output (ISO,
// DateStyle's default).
func parsePGTime(v string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00", "2006-01-02 15:04:05.999999-07:00:00"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("cannot parse time %q", v)
}

// newSuffix is 8 random hex digits, for a watcher's slot.
func newSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
