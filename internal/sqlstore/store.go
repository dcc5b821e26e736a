// Package sqlstore runs the outbox's SQL for every dialect on an abstract
// connection. Driver modules adapt their database library to DB and Querier and
// supply a Classifier for its error codes; everything else is shared, so every
// dialect behaves the same way and passes the same suite.
package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outbox-go/outbox"
)

// Rows is the part of a result set the store reads.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// Querier runs statements: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Tx is a transaction the store began itself.
type Tx interface {
	Querier
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// DB is a connection pool.
type DB interface {
	Querier
	Begin(ctx context.Context) (Tx, error)
}

// readCommittedDB is a DB that begins READ COMMITTED transactions, for the
// claims and cleanups of MySQL.
type readCommittedDB interface {
	BeginReadCommitted(ctx context.Context) (Tx, error)
}

// SetupBeginner is a DB that can begin a transaction and run setup
// statements (a dialect's claimSetup, no arguments) in one round trip, as
// pgx does with its BeginQuery. Without it the setup is a statement of its
// own.
type SetupBeginner interface {
	BeginWith(ctx context.Context, setup string) (Tx, error)
}

// TxPipeliner is a DB that can send a whole short transaction in one round
// trip, as pgx does with a batch: BEGIN, the setup statements, one query and
// COMMIT. scan reads the query's rows before the call returns; an error
// anywhere rolls the transaction back.
type TxPipeliner interface {
	QueryCommitted(ctx context.Context, setup []string, query string, args []any, scan func(Rows) error) error
}

// ErrorKind is what a database error means to the outbox.
type ErrorKind int

const (
	ErrOther ErrorKind = iota
	// ErrUnique is a unique-key violation.
	ErrUnique
	// ErrUndefinedTable is a missing table.
	ErrUndefinedTable
	// ErrConnection is a connection the server closed or lost: nothing
	// that was sent on it took effect unless it was committed.
	ErrConnection
	// ErrDuplicateColumn is an ALTER TABLE ... ADD COLUMN of a column, or
	// ADD INDEX of an index, that is there already.
	ErrDuplicateColumn
	// ErrUndefinedColumn is a missing column: tables of an older schema.
	ErrUndefinedColumn
	// ErrRejected is a value the database refused: a CHECK constraint
	// (MariaDB's json_valid, which allows 31 levels of nesting; SQLite's),
	// text the column's character set cannot hold, JSON its type refuses.
	ErrRejected
)

// Classifier translates a driver's error codes.
type Classifier func(error) ErrorKind

// Store implements outbox.Store and the transactional calls of outbox.Driver.
type Store struct {
	db       DB
	c        *compiled
	classify Classifier
	tables   outbox.Tables
	// ko is the SQL of the per-key hold-back (keyorder.go).
	ko keyOrderSQL
	// claimIDs is ClaimIDs' statement with table names substituted.
	claimIDs string
	// seqChecked: the id sequence's cache was found to be 1 (seqCache).
	seqChecked atomic.Bool
	// probe is AnyDue's state (probe.go).
	probe prober
}

// New returns a Store for the named dialect ("postgres", "mysql", "sqlite").
func New(db DB, dialectName string, tables outbox.Tables, classify Classifier) (*Store, error) {
	d, c, tables, err := compileFor(dialectName, tables)
	if err != nil {
		return nil, err
	}
	if _, ok := db.(sessionDB); !ok && d.unlockMigration != "" {
		return nil, fmt.Errorf("outbox: the %s dialect's migration lock belongs to a connection: its DB must be able to hold one (sqlstore.SQLDB)", dialectName)
	}
	return &Store{db: db, c: c, classify: classify, tables: tables, ko: compileKeyOrder(d, tables), claimIDs: compileClaimIDs(d, tables)}, nil
}

var _ outbox.Store = (*Store)(nil)

// Dialect implements outbox.Store.
func (s *Store) Dialect() string { return s.c.name }

// ClaimOverlap implements outbox.ClaimOverlapper. PostgreSQL's and MySQL's
// claims commit at once and leave no lock behind, so Relay.Run may claim
// beside a mark. SQLite's claims and marks take the one write lock (and hold
// no connection in between), so a claim goes only beside a publish.
func (s *Store) ClaimOverlap() outbox.ClaimOverlap {
	if s.c.mode == claimRange {
		return outbox.OverlapPublish
	}
	return outbox.OverlapAll
}

// Tables implements outbox.Store.
func (s *Store) Tables() outbox.Tables { return s.tables }

// wrap translates a database error at the boundary.
func (s *Store) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if s.classify != nil {
		switch s.classify(err) {
		case ErrUndefinedTable:
			return fmt.Errorf("outbox: %s: %w (table %q or %q: %w)", op, outbox.ErrSchemaMissing, s.tables.Outbox, s.tables.Inbox, err)
		case ErrUndefinedColumn:
			return fmt.Errorf("outbox: %s: %w (a column is missing from table %q: this build needs schema version %d): %w",
				op, outbox.ErrSchemaMissing, s.tables.Outbox, s.LatestVersion(), err)
		}
	}
	return fmt.Errorf("outbox: %s: %w", op, err)
}

// InsertOne returns the statement and arguments that insert m. The
// statement changes no row when m's msg_id is already in the table (ON
// CONFLICT DO NOTHING where the dialect has it), so that the caller's
// transaction stays usable; InsertedOne reads its row count.
func (s *Store) InsertOne(m *outbox.Message) (string, []any, error) {
	headers, err := encodeHeaders(m.Headers)
	if err != nil {
		return "", nil, err
	}
	return s.c.insertOne, []any{m.MsgID, m.Topic, nullString(m.Key), string(m.Payload), headers}, nil
}

// InsertOneStrict is InsertOne for a statement whose row count nobody may
// read (outboxpgx's WriteOnCommit, sent with the COMMIT, and QueueWrite, in
// the caller's batch): a msg_id already in the table is an error
// (ErrUnique), which on PostgreSQL aborts the transaction, so that nothing
// of it commits.
func (s *Store) InsertOneStrict(m *outbox.Message) (string, []any, error) {
	stmt, args, err := s.InsertOne(m)
	if s.c.insertOneStrict != "" {
		stmt = s.c.insertOneStrict
	}
	return stmt, args, err
}

// InsertedOne reads the rows InsertOne's statement affected: none means
// msgID was already in the table.
func InsertedOne(msgID string, rowsAffected int64) error {
	if rowsAffected == 0 {
		return &outbox.DuplicateError{MsgIDs: []string{msgID}}
	}
	return nil
}

// InsertTx implements outbox.Driver's InsertTx on q, the caller's transaction.
func (s *Store) InsertTx(ctx context.Context, q Querier, msgs []outbox.Message) error {
	if len(msgs) == 1 {
		m := &msgs[0]
		stmt, args, err := s.InsertOne(m)
		if err != nil {
			return err
		}
		n, err := q.Exec(ctx, stmt, args...)
		if err != nil {
			switch s.classify(err) {
			case ErrUnique:
				return &outbox.DuplicateError{MsgIDs: []string{m.MsgID}}
			case ErrRejected:
				return s.Rejected(0, m.MsgID, err)
			}
			return s.wrap("insert message", err)
		}
		return InsertedOne(m.MsgID, n)
	}
	if s.c.insertManyPG != "" {
		return s.insertManyArrays(ctx, q, msgs)
	}
	args := make([]any, 0, 5*len(msgs))
	for i := range msgs {
		m := &msgs[i]
		headers, err := encodeHeaders(m.Headers)
		if err != nil {
			return err
		}
		args = append(args, m.MsgID, m.Topic, nullString(m.Key), string(m.Payload), headers)
	}
	if _, err := q.Exec(ctx, s.c.insertMany(len(msgs)), args...); err != nil {
		switch s.classify(err) {
		case ErrUnique:
			// The statement failed as a whole and the transaction goes on; say
			// which msg_ids were there already.
			return s.duplicates(ctx, q, msgs)
		case ErrRejected:
			return s.Rejected(-1, "", err)
		}
		return s.wrap("insert messages", err)
	}
	return nil
}

// Rejected reports a message the database refused though it passed
// outbox's validation (a dialect's own limit, such as MariaDB's 31 levels of
// JSON nesting), as an outbox.ValidationError that wraps the database's
// error. index is the message's position in the call, or -1 when a
// statement of several rows failed as a whole.
func (s *Store) Rejected(index int, msgID string, err error) error {
	reason := "the database refused it"
	if s.c.name == "postgres" {
		reason += ", and PostgreSQL aborted the transaction: roll back"
	}
	return &outbox.ValidationError{Index: index, MsgID: msgID, Field: "message",
		Reason: reason + " (" + err.Error() + ")", Err: err}
}

// insertManyArrays inserts from arrays with ON CONFLICT DO NOTHING, so that a
// duplicate does not abort the caller's PostgreSQL transaction; on a duplicate
// it deletes what it inserted, to keep the call all or nothing.
func (s *Store) insertManyArrays(ctx context.Context, q Querier, msgs []outbox.Message) error {
	ids := make([]string, len(msgs))
	topics := make([]string, len(msgs))
	keys := make([]string, len(msgs))
	payloads := make([]string, len(msgs))
	headers := make([]string, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		ids[i], topics[i], keys[i], payloads[i] = m.MsgID, m.Topic, m.Key, string(m.Payload)
		if len(m.Headers) > 0 {
			h, err := json.Marshal(m.Headers)
			if err != nil {
				return err
			}
			headers[i] = string(h)
		}
	}
	rows, err := q.Query(ctx, s.c.insertManyPG, ids, topics, keys, payloads, headers)
	if err != nil {
		return s.insertError(err)
	}
	inserted, err := scanStrings(rows)
	if err != nil {
		return s.insertError(err)
	}
	if len(inserted) == len(msgs) {
		return nil
	}
	if len(inserted) > 0 {
		if _, err := q.Exec(ctx, s.c.deleteInserted, inserted); err != nil {
			return s.wrap("undo partial insert", err)
		}
	}
	got := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		got[id] = true
	}
	var dups []string
	for _, id := range ids {
		if !got[id] {
			dups = append(dups, id)
		}
	}
	return &outbox.DuplicateError{MsgIDs: dups}
}

func (s *Store) insertError(err error) error {
	if s.classify(err) == ErrRejected {
		return s.Rejected(-1, "", err)
	}
	return s.wrap("insert messages", err)
}

func (s *Store) duplicates(ctx context.Context, q Querier, msgs []outbox.Message) error {
	ids := make([]string, len(msgs))
	for i := range msgs {
		ids[i] = msgs[i].MsgID
	}
	rows, err := q.Query(ctx, s.c.existing, jsonArray(ids))
	if err != nil {
		return s.wrap("find duplicates", err)
	}
	dups, err := scanStrings(rows)
	if err != nil {
		return s.wrap("find duplicates", err)
	}
	if len(dups) == 0 {
		dups = ids // a concurrent writer's row that is not visible to us yet
	}
	sort.Strings(dups)
	return &outbox.DuplicateError{MsgIDs: dups}
}

// MarkConsumedTx implements outbox.Driver's MarkConsumedTx on q.
func (s *Store) MarkConsumedTx(ctx context.Context, q Querier, group, msgID string) (bool, error) {
	n, err := q.Exec(ctx, s.c.consume, group, msgID)
	if err != nil {
		if s.classify(err) == ErrUnique {
			return false, nil
		}
		return false, s.wrap("record consumed message", err)
	}
	return n > 0, nil
}

// Migrate implements outbox.Store.
//
// Two processes that migrate the same tables take turns on a lock. A
// transaction's lock (PostgreSQL's advisory lock) is taken in the
// migration's transaction. A session's lock (MySQL's GET_LOCK) outlives the
// transaction, so it is taken on a connection held for the whole migration
// and released after the commit or rollback, before that connection goes
// back to the pool; otherwise the pool would keep it after a failure, and
// the next migrator would wait for it.
func (s *Store) Migrate(ctx context.Context) error {
	lockName := "outbox-migrate:" + s.tables.Outbox
	db := s.db
	if s.c.unlockMigration != "" {
		conn, err := db.(sessionDB).Session(ctx)
		if err != nil {
			return s.wrap("migrate", err)
		}
		if err := s.lockSession(ctx, conn, lockName); err != nil {
			// What the session holds is unknown when the answer was lost.
			conn.Discard()
			return err
		}
		// After the transaction's commit or rollback below. A connection
		// whose lock did not go is closed, which frees the lock.
		defer func() {
			if s.unlockSession(context.WithoutCancel(ctx), conn, lockName) {
				conn.Close()
			} else {
				conn.Discard()
			}
		}()
		db = conn
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return s.wrap("migrate", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if s.c.lockMigrations != "" && s.c.unlockMigration == "" {
		rows, err := tx.Query(ctx, s.c.lockMigrations, lockName)
		if err != nil {
			return s.wrap("migrate: lock", err)
		}
		if err := drain(rows); err != nil {
			return s.wrap("migrate: lock", err)
		}
	}
	if _, err := tx.Exec(ctx, s.c.migrationsTable); err != nil {
		return s.wrap("migrate: create migrations table", err)
	}
	current, err := s.schemaVersion(ctx, tx)
	if err != nil {
		return err
	}
	for _, m := range s.c.migrations {
		if m.version <= current {
			continue
		}
		for _, stmt := range m.statements {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				// MySQL commits an ALTER TABLE on its own, so a migration that
				// stopped after it, before recording its version, finds the
				// column there when it runs again (MySQL 8 has no ADD COLUMN
				// IF NOT EXISTS).
				if s.classify != nil && s.classify(err) == ErrDuplicateColumn {
					continue
				}
				return s.wrap(fmt.Sprintf("migrate: %s", m.name), err)
			}
		}
		if _, err := tx.Exec(ctx, s.c.recordVersion, m.version, m.name); err != nil {
			return s.wrap("migrate: record version", err)
		}
	}
	return s.wrap("migrate: commit", tx.Commit(ctx))
}

// sessionDB is a DB that can hold one of its connections, for a dialect
// whose migration lock belongs to the connection (MySQL's GET_LOCK).
type sessionDB interface {
	Session(ctx context.Context) (session, error)
}

// session is one connection of a pool, held until Close or Discard.
type session interface {
	DB
	// Close gives the connection back to the pool.
	Close() error
	// Discard closes the connection instead, which ends the server's session
	// and frees whatever it held.
	Discard() error
}

// lockSession takes the dialect's session lock on conn (MySQL's GET_LOCK),
// and fails unless the server granted it.
func (s *Store) lockSession(ctx context.Context, conn session, name string) error {
	var got *int64
	wait := int64(migrationLockWait / time.Second)
	if _, err := queryRow(ctx, conn, s.c.lockMigrations, []any{name, wait}, &got); err != nil {
		return fmt.Errorf("outbox: migrate: could not take the migration lock %q of table %q: %w", name, s.tables.Outbox, err)
	}
	switch {
	case got == nil:
		return fmt.Errorf("outbox: migrate: could not take the migration lock %q of table %q: the server answered NULL (the wait was killed, or the server ran out of memory); retry", name, s.tables.Outbox)
	case *got != 1:
		return fmt.Errorf("outbox: migrate: another process is migrating table %q: it still held the lock %q after %s; retry when it is done", s.tables.Outbox, name, migrationLockWait)
	}
	return nil
}

// migrationLockWait is how long a session's lock (MySQL's GET_LOCK) waits
// for another migrator.
const migrationLockWait = 60 * time.Second

// unlockSession releases the session lock that lockSession took, and
// reports whether the server released it.
func (s *Store) unlockSession(ctx context.Context, conn session, name string) bool {
	var released *int64
	_, err := queryRow(ctx, conn, s.c.unlockMigration, []any{name}, &released)
	return err == nil && released != nil && *released == 1
}

// SchemaVersion implements outbox.Store.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	v, err := s.schemaVersion(ctx, s.db)
	if err != nil && errors.Is(err, outbox.ErrSchemaMissing) {
		return 0, nil
	}
	return v, err
}

func (s *Store) schemaVersion(ctx context.Context, q Querier) (int, error) {
	rows, err := q.Query(ctx, s.c.schemaVersion)
	if err != nil {
		return 0, s.wrap("schema version", err)
	}
	defer rows.Close()
	v := 0
	if rows.Next() {
		if err := rows.Scan(&v); err != nil {
			return 0, s.wrap("schema version", err)
		}
	}
	return v, s.wrap("schema version", rows.Err())
}

// RescanMark is where a PostgreSQL relay's rescans start: every row at or
// below ID is SENT, DEAD, or in the requeued index. A mark far behind the
// newest row means something holds it back (a transaction left open, a
// prepared transaction), and each rescan walks the rows in between.
type RescanMark struct {
	ID int64
	// NewestID is the highest id in the table.
	NewestID int64
	// Behind is how long ago the first row above the mark was written (0 when
	// there is none).
	Behind time.Duration
}

// RescanMark returns the low-water mark of the relays' rescans; ok is false
// for a dialect that has none (MySQL, SQLite).
func (s *Store) RescanMark(ctx context.Context) (m RescanMark, ok bool, err error) {
	if s.c.rescanMark == "" {
		return m, false, nil
	}
	var behind float64
	found, err := queryRow(ctx, s.db, s.c.rescanMark, nil, &m.ID, &m.NewestID, &behind)
	if err != nil {
		return m, false, s.wrap("rescan mark", err)
	}
	m.Behind = time.Duration(behind * float64(time.Second))
	return m, found, nil
}

// LatestVersion is the newest migration this build knows.
func (s *Store) LatestVersion() int { return s.c.migrations[len(s.c.migrations)-1].version }

// Stats implements outbox.Store: the NEW rows as Backlog reads them, the
// DEAD rows through their index, and Sent estimated from the two ends of
// the primary key.
func (s *Store) Stats(ctx context.Context) (outbox.Stats, error) {
	st := outbox.Stats{SentEstimated: true}
	q, done, err := s.backlogQuerier(ctx)
	if err != nil {
		return st, s.wrap("stats", err)
	}
	defer done()
	byTopic := map[string]*outbox.TopicStats{}
	topic := func(name string) *outbox.TopicStats {
		ts := byTopic[name]
		if ts == nil {
			ts = &outbox.TopicStats{Topic: name}
			byTopic[name] = ts
		}
		return ts
	}
	err = eachRow(ctx, q, s.c.statsPending, func(rows Rows) error {
		var name string
		var n int64
		var oldest, now lenientTime
		if err := rows.Scan(&name, &n, &oldest, &now); err != nil {
			return err
		}
		ts := topic(name)
		ts.Pending = n
		st.Pending += n
		if n > 0 && oldest.Valid && now.Valid {
			ts.OldestPendingAge = max(now.Time.Sub(oldest.Time), 0)
			st.OldestPendingAge = max(st.OldestPendingAge, ts.OldestPendingAge)
		}
		return nil
	})
	if err == nil {
		err = eachRow(ctx, q, s.c.statsDead, func(rows Rows) error {
			var name string
			var n int64
			if err := rows.Scan(&name, &n); err != nil {
				return err
			}
			topic(name).Dead = n
			st.Dead += n
			return nil
		})
	}
	var span int64
	if err == nil {
		_, err = queryRow(ctx, q, s.c.statsSpan, nil, &span)
	}
	if err != nil {
		return outbox.Stats{}, s.wrap("stats", err)
	}
	st.Sent = max(span-st.Pending-st.Dead, 0)
	for _, ts := range byTopic {
		st.Topics = append(st.Topics, *ts)
	}
	sort.Slice(st.Topics, func(i, j int) bool { return st.Topics[i].Topic < st.Topics[j].Topic })
	return st, nil
}

// eachRow runs query on q and calls fn for each row.
func eachRow(ctx context.Context, q Querier, query string, fn func(Rows) error) error {
	rows, err := q.Query(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

var _ outbox.BacklogReader = (*Store)(nil)

// Backlog implements outbox.BacklogReader: it reads the NEW rows and the
// DEAD rows, each through an index.
func (s *Store) Backlog(ctx context.Context) (outbox.Backlog, error) {
	var b outbox.Backlog
	q, done, err := s.backlogQuerier(ctx)
	if err != nil {
		return b, s.wrap("backlog", err)
	}
	defer done()
	var oldest, now lenientTime
	if _, err := queryRow(ctx, q, s.c.backlog, nil, &b.Pending, &oldest, &now); err != nil {
		return b, s.wrap("backlog", err)
	}
	if b.Pending > 0 && oldest.Valid && now.Valid {
		b.OldestPendingAge = max(now.Time.Sub(oldest.Time), 0)
	}
	if _, err := queryRow(ctx, q, s.c.deadCount, nil, &b.Dead); err != nil {
		return b, s.wrap("backlog", err)
	}
	b.DeadCounted = true
	return b, nil
}

// backlogQuerier is where Backlog's statements run: a transaction that
// begins with the dialect's backlogSetup (rolled back by done), or else the
// pool, since a transaction would take SQLite's write lock at its start.
func (s *Store) backlogQuerier(ctx context.Context) (q Querier, done func(), err error) {
	if s.c.backlogSetup == "" {
		return s.db, func() {}, nil
	}
	tx, err := s.beginRetrying(ctx, s.beginWith(s.c.backlogSetup))
	if err != nil {
		return nil, nil, err
	}
	return tx, func() { tx.Rollback(context.WithoutCancel(ctx)) }, nil
}

// listQuery is the statement that lists f's messages, and its arguments:
// the dialect's DEAD list, which names its DEAD index's condition, for the
// DEAD ones where it has one.
func (s *Store) listQuery(f outbox.ListFilter) (string, []any) {
	if f.Status == outbox.StatusDead && s.c.listDead != "" {
		return s.c.listDead, []any{f.Topic, f.AfterID, f.Limit}
	}
	if f.Status == outbox.StatusNew && s.c.listNew != "" {
		return s.c.listNew, []any{f.Topic, f.AfterID, f.Limit}
	}
	return s.c.list, []any{int(f.Status), f.Topic, f.AfterID, f.Limit}
}

// ListMessages implements outbox.Store.
func (s *Store) ListMessages(ctx context.Context, f outbox.ListFilter) ([]outbox.Message, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	stmt, args := s.listQuery(f)
	var q Querier = s.db
	if f.Status == outbox.StatusNew && s.c.listNew != "" {
		bq, done, err := s.backlogQuerier(ctx)
		if err != nil {
			return nil, s.wrap("list messages", err)
		}
		defer done()
		q = bq
	}
	rows, err := q.Query(ctx, stmt, args...)
	if err != nil {
		return nil, s.wrap("list messages", err)
	}
	defer rows.Close()
	var out []outbox.Message
	for rows.Next() {
		var m outbox.Message
		var key, lastErr textValue
		var status int16
		var next, created, sent, dead lenientTime
		if err := rows.Scan(&m.ID, &m.MsgID, &m.Topic, &key, &status, &m.Retries, &next, &created, &sent, &lastErr, &dead); err != nil {
			return nil, s.wrap("list messages", err)
		}
		m.Key, m.LastError, m.Status = key.s, lastErr.s, outbox.Status(status)
		m.NextRetryAt, m.CreatedAt, m.SentAt, m.DeadAt = next.Time, created.Time, sent.Time, dead.Time
		out = append(out, m)
	}
	return out, s.wrap("list messages", rows.Err())
}

// GetMessage implements outbox.Store.
func (s *Store) GetMessage(ctx context.Context, msgID string) (outbox.Message, error) {
	rows, err := s.db.Query(ctx, s.c.get, msgID)
	if err != nil {
		return outbox.Message{}, s.wrap("get message", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return outbox.Message{}, s.wrap("get message", err)
		}
		return outbox.Message{}, fmt.Errorf("%w: msg_id %q", outbox.ErrNotFound, msgID)
	}
	var m outbox.Message
	var key, lastErr textValue
	var payload, headers []byte
	var status int16
	var next, created, sent, dead lenientTime
	if err := rows.Scan(&m.ID, &m.MsgID, &m.Topic, &key, &payload, &headers, &status, &m.Retries, &next, &created, &sent, &lastErr, &dead); err != nil {
		return m, s.wrap("get message", err)
	}
	m.Key, m.LastError, m.Status, m.Payload = key.s, lastErr.s, outbox.Status(status), payload
	m.NextRetryAt, m.CreatedAt, m.SentAt, m.DeadAt = next.Time, created.Time, sent.Time, dead.Time
	if m.Headers, err = decodeHeaders(headers); err != nil {
		return m, err
	}
	return m, nil
}

// RetryDead implements outbox.Store.
func (s *Store) RetryDead(ctx context.Context, f outbox.DeadFilter, note string) (int64, error) {
	if !f.All && len(f.MsgIDs) == 0 {
		return 0, nil
	}
	keys, err := s.deadKeys(ctx, f)
	if err != nil {
		return 0, err
	}
	n, err := s.db.Exec(ctx, s.c.retryDead, note, jsonArray(f.MsgIDs), f.All, f.Topic)
	if err != nil {
		return n, s.wrap("retry dead messages", err)
	}
	return n, s.releaseKeys(ctx, keys)
}

// DropDead implements outbox.Store.
func (s *Store) DropDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	if !f.All && len(f.MsgIDs) == 0 {
		return 0, nil
	}
	keys, err := s.deadKeys(ctx, f)
	if err != nil {
		return 0, err
	}
	n, err := s.db.Exec(ctx, s.c.dropDead, jsonArray(f.MsgIDs), f.All, f.Topic)
	if err != nil {
		return n, s.wrap("drop dead messages", err)
	}
	return n, s.releaseKeys(ctx, keys)
}

// DeleteSent implements outbox.Store.
func (s *Store) DeleteSent(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	return s.deleteOld(ctx, s.c.oldSent, s.c.deleteSent, "delete sent messages", olderThan, limit, scanID)
}

// DeleteConsumed implements outbox.Store.
func (s *Store) DeleteConsumed(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	return s.deleteOld(ctx, s.c.oldConsumed, s.c.deleteConsumed, "delete inbox records", olderThan, limit, scanInboxKey)
}

// deleteOld runs a cleanup: del, whose arguments are the age (in
// milliseconds) and the limit; or, where the dialect reads the keys first
// (sel, MySQL), sel with the age in microseconds and the limit, then del
// with the keys (each read by scan) as a JSON array and the age in
// microseconds.
func (s *Store) deleteOld(ctx context.Context, sel, del, what string, olderThan time.Duration, limit int,
	scan func(Rows) (any, error)) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("outbox: %s: older-than %s is negative", what, olderThan)
	}
	if sel == "" {
		n, err := s.execCleanup(ctx, del, olderThan.Milliseconds(), limit)
		return n, s.wrap(what, err)
	}
	rows, err := s.db.Query(ctx, sel, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, s.wrap(what, err)
	}
	var keys []any
	for rows.Next() {
		k, err := scan(rows)
		if err != nil {
			rows.Close()
			return 0, s.wrap(what, err)
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(keys) == 0 {
		return 0, s.wrap(what, err)
	}
	list, err := json.Marshal(keys)
	if err != nil {
		return 0, err
	}
	n, err := s.execCleanup(ctx, del, string(list), olderThan.Microseconds())
	return n, s.wrap(what, err)
}

// scanID reads an outbox row's id.
func scanID(rows Rows) (any, error) {
	var id int64
	err := rows.Scan(&id)
	return id, err
}

// scanInboxKey reads an inbox record's primary key, as a [group, msg_id] pair.
func scanInboxKey(rows Rows) (any, error) {
	var k [2]string
	err := rows.Scan(&k[0], &k[1])
	return k, err
}

// execCleanup runs a cleanup's DELETE. On InnoDB it runs at READ COMMITTED:
// at REPEATABLE READ a DELETE also locks the gaps between the rows it
// reads, until it ends, and the gap after the last SENT row (or after a key
// that is gone) is where writers and consumers insert.
func (s *Store) execCleanup(ctx context.Context, stmt string, args ...any) (int64, error) {
	rc, ok := s.db.(readCommittedDB)
	if !ok || s.c.mode != claimRowLease {
		return s.db.Exec(ctx, stmt, args...)
	}
	tx, err := rc.BeginReadCommitted(ctx)
	if err != nil {
		return 0, err
	}
	n, err := tx.Exec(ctx, stmt, args...)
	if err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return 0, err
	}
	return n, tx.Commit(ctx)
}

// ExplainClaim returns the database's plans for the claim's statements, one
// line per plan line: the rescan (from the first id, or PostgreSQL's
// low-water mark) and, where the dialect has one, the claim from a cursor,
// after a line "-- from a cursor". The claim's setup runs first.
func (s *Store) ExplainClaim(ctx context.Context) (string, error) {
	begin := s.db.Begin
	if s.c.claimSetup != "" {
		begin = s.beginWith(s.c.claimSetup)
	}
	tx, err := begin(ctx)
	if err != nil {
		return "", s.wrap("explain claim", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var plan strings.Builder
	for i, q := range []string{s.c.claim, s.c.claimAfter} {
		if q == "" {
			continue
		}
		if i > 0 {
			plan.WriteString("-- from a cursor\n")
		}
		args := []any{int64(i), 500}
		if s.c.mode == claimChunks {
			args = append(args, "explain", int64(1000), "", int64(0))
		}
		if err := s.explainInto(ctx, tx, &plan, q, args...); err != nil {
			return "", s.wrap("explain claim", err)
		}
	}
	return plan.String(), nil
}

// ExplainBacklog returns the database's plans for Backlog's statements, one
// line per plan line, the dead count's after a line "-- dead". The
// backlog's setup runs first.
func (s *Store) ExplainBacklog(ctx context.Context) (string, error) {
	q, done, err := s.backlogQuerier(ctx)
	if err != nil {
		return "", s.wrap("explain backlog", err)
	}
	defer done()
	var plan strings.Builder
	for i, stmt := range []string{s.c.backlog, s.c.deadCount} {
		if i > 0 {
			plan.WriteString("-- dead\n")
		}
		if err := s.explainInto(ctx, q, &plan, stmt); err != nil {
			return "", s.wrap("explain backlog", err)
		}
	}
	return plan.String(), nil
}

// ExplainDead returns the database's plans for the statements on the DEAD
// rows, as ListMessages, Backlog, RetryDead and DropDead run them (the last
// two for every DEAD row), one line per plan line, each after a line "--
// list", "-- count", "-- retry" or "-- drop". Nothing is changed.
func (s *Store) ExplainDead(ctx context.Context) (string, error) {
	list, listArgs := s.listQuery(outbox.ListFilter{Status: outbox.StatusDead, Limit: 100})
	q, done, err := s.backlogQuerier(ctx)
	if err != nil {
		return "", s.wrap("explain dead", err)
	}
	defer done()
	return s.explainAll(ctx, "explain dead", []explained{
		{"list", s.db, list, listArgs},
		{"count", q, s.c.deadCount, nil},
		{"retry", s.db, s.c.retryDead, []any{"", "[]", true, ""}},
		{"drop", s.db, s.c.dropDead, []any{"[]", true, ""}},
	})
}

// ExplainStats returns the database's plans for the statements of Stats
// and for ListMessages of the NEW rows, one line per plan line, each after
// a line "-- pending", "-- dead", "-- span" or "-- list new". Nothing is
// changed.
func (s *Store) ExplainStats(ctx context.Context) (string, error) {
	list, listArgs := s.listQuery(outbox.ListFilter{Status: outbox.StatusNew, Limit: 100})
	q, done, err := s.backlogQuerier(ctx)
	if err != nil {
		return "", s.wrap("explain stats", err)
	}
	defer done()
	var listQ Querier = s.db
	if s.c.listNew != "" {
		listQ = q
	}
	return s.explainAll(ctx, "explain stats", []explained{
		{"pending", q, s.c.statsPending, nil},
		{"dead", q, s.c.statsDead, nil},
		{"span", q, s.c.statsSpan, nil},
		{"list new", listQ, list, listArgs},
	})
}

// explained is one statement of an Explain call, under its name.
type explained struct {
	name string
	q    Querier
	stmt string
	args []any
}

// explainAll writes the plan of every statement of stmts, each after a line
// "-- name". what names the call in an error.
func (s *Store) explainAll(ctx context.Context, what string, stmts []explained) (string, error) {
	var plan strings.Builder
	for _, e := range stmts {
		plan.WriteString("-- " + e.name + "\n")
		if err := s.explainInto(ctx, e.q, &plan, e.stmt, e.args...); err != nil {
			return "", s.wrap(what+": "+e.name, err)
		}
	}
	return plan.String(), nil
}

// explainInto writes the plan of stmt to plan, one line per plan line.
func (s *Store) explainInto(ctx context.Context, q Querier, plan *strings.Builder, stmt string, args ...any) error {
	rows, err := q.Query(ctx, s.c.explain+stmt, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		cols, err := rowStrings(rows)
		if err != nil {
			return err
		}
		plan.WriteString(strings.Join(cols, " ") + "\n")
	}
	return rows.Err()
}

// Truncate deletes every row of the outbox table, whatever its status. It is
// for benchmarks on tables of their own, never for production tables, and is
// deliberately not part of outbox.Store.
func (s *Store) Truncate(ctx context.Context) error {
	_, err := s.db.Exec(ctx, s.c.truncate)
	return s.wrap("truncate", err)
}

func encodeHeaders(h map[string]string) (any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	// Text, not bytes: SQLite would store []byte as a BLOB.
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func decodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err == nil {
		return h, nil
	}
	// A sidecar writer may store values that are not strings ({"attempt": 2}):
	// keep them, as their JSON text.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		// Not an object at all: keep the message deliverable and say so in a
		// header of our own rather than drop what was written.
		return map[string]string{"outboxbadheaders": strconv.Quote(string(b))}, nil
	}
	h = make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			h[k] = s
		} else {
			h[k] = string(v)
		}
	}
	return h, nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func jsonArray[T any](v []T) string {
	if len(v) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func scanStrings(rows Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// rowStrings reads a row of unknown shape as text.
func rowStrings(rows Rows) ([]string, error) {
	type columner interface{ Columns() ([]string, error) }
	n := 1
	if c, ok := rows.(columner); ok {
		cols, err := c.Columns()
		if err != nil {
			return nil, err
		}
		n = len(cols)
	}
	vals := make([]textValue, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	out := make([]string, n)
	for i, v := range vals {
		out[i] = v.s
	}
	return out, nil
}

func drain(rows Rows) error {
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}
