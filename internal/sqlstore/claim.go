package sqlstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-go/outbox"
)

// Claim implements outbox.Store: see claimMode for how each dialect keeps two
// relays off the same rows. The claim commits before it returns; the batch is
// held by a lease of p.Lease, which must be positive.
func (s *Store) Claim(ctx context.Context, p outbox.ClaimParams) (outbox.Claim, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("outbox: claim: limit %d must be positive", p.Limit)
	}
	if p.Lease <= 0 {
		return nil, fmt.Errorf("outbox: claim: lease %s must be positive (RelayConfig.Lease)", p.Lease)
	}
	switch s.c.mode {
	case claimRange:
		return s.claimRange(ctx, p)
	case claimRowLease:
		return s.claimRows(ctx, p)
	}
	return s.claimChunks(ctx, p)
}

// claimChunks claims for PostgreSQL in one statement and commits at once:
// the statement records the chunks it took in {{claims}} under a new token,
// with the lease's end (see postgresDialect.claim).
func (s *Store) claimChunks(ctx context.Context, p outbox.ClaimParams) (outbox.Claim, error) {
	after := p.AfterID
	if after == 0 && s.c.sweepCheck != "" {
		lwm, err := s.sweep(ctx)
		if err != nil {
			return nil, err
		}
		after = lwm
	}
	q := s.c.claim
	if p.AfterID > 0 && s.c.claimAfter != "" {
		q = s.c.claimAfter
	}
	c := &leaseClaim{s: s, token: newToken()}
	c.prevToken, c.prevLast = s.predecessor(p)
	// A chunk that changed after the statement's snapshot is left (see
	// postgresDialect.claim) and marked with a row of id 0: the claim looks
	// again for the rows still wanted, with a new snapshot, in which this
	// claim's own chunks are leased.
	for range 4 {
		changed, err := s.claimChunksOnce(ctx, c, q, after, p)
		if err != nil {
			if len(c.msgs) > 0 || ctx.Err() != nil {
				// Give back what the attempts before claimed, and what a
				// statement cancelled after its commit may have recorded.
				c.release(context.WithoutCancel(ctx), "claim: release")
			}
			return nil, s.wrap("claim", err)
		}
		if !changed || len(c.msgs) >= p.Limit {
			break
		}
	}
	if !sortedByID(c.msgs) {
		sortClaimed(c.msgs, c.ctids)
	}
	return c, nil
}

// predecessor returns the token and the last id of p.Prev, whose chunks
// the claim may take over for the rows past that id (see holdChunks), or
// "" and 0.
func (s *Store) predecessor(p outbox.ClaimParams) (token string, last int64) {
	prev, ok := p.Prev.(*leaseClaim)
	if !ok || prev.s != s || len(prev.msgs) == 0 {
		return "", 0
	}
	return prev.token, prev.msgs[len(prev.msgs)-1].ID
}

// claimChunksOnce runs the claim statement q once, in a transaction of its
// own (in one round trip where the DB is a TxPipeliner), and adds the rows
// it claimed to c. changed reports a chunk left because it changed after
// the statement's snapshot.
func (s *Store) claimChunksOnce(ctx context.Context, c *leaseClaim, q string, after any, p outbox.ClaimParams) (changed bool, err error) {
	args := []any{after, p.Limit - len(c.msgs), c.token, p.Lease.Milliseconds(), c.prevToken, c.prevLast}
	var msgs []outbox.Message
	var ctids []string
	scan := func(rows Rows) (err error) {
		ctids = nil
		msgs, err = scanClaimed(rows, s.c.claimReturnsDue, p.Limit, &ctids)
		return err
	}
	if pl, ok := s.db.(TxPipeliner); ok {
		// The pipeline ends in its COMMIT: cancelled half way, the server
		// may still commit the claim, and its lease would hide the rows
		// with nobody to release it. So a claim under way is given
		// claimGrace to end once ctx is cancelled.
		sctx, stop := withGrace(ctx, claimGrace)
		defer stop()
		// Safe to repeat on a connection the server had closed: nothing
		// was committed on it.
		_, err = onLiveConnection(sctx, s, func() (struct{}, error) {
			return struct{}{}, pl.QueryCommitted(sctx, s.c.claimSetupStatements(), q, args, scan)
		})
		if err != nil {
			return false, err
		}
	} else {
		begin := s.db.Begin
		if setup := s.c.claimSetup; setup != "" {
			begin = s.beginWith(setup)
		}
		tx, err := s.beginRetrying(ctx, begin)
		if err != nil {
			return false, err
		}
		rows, err := tx.Query(ctx, q, args...)
		if err == nil {
			err = scan(rows)
		}
		if err != nil {
			tx.Rollback(context.WithoutCancel(ctx))
			return false, err
		}
		if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
			return false, err
		}
	}
	changed = len(msgs) > 0 && msgs[0].ID == 0 // sorted by id
	if changed {
		msgs, ctids = msgs[1:], ctids[1:]
	}
	c.msgs, c.ctids = append(c.msgs, msgs...), append(c.ctids, ctids...)
	return changed, nil
}

// claimGrace is how long a claim under way may go on once its context is
// cancelled.
const claimGrace = 2 * time.Second

// withGrace returns a context that is cancelled grace after ctx is, and the
// function that releases it.
func withGrace(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	g, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return g, func() {
		stop()
		cancel()
	}
}

// claimSetupStatements is claimSetup as one statement of the extended
// protocol: SET LOCAL name = value becomes set_config(name, value, true).
func (c *compiled) claimSetupStatements() []string {
	return setupStatements(c.claimSetup)
}

// setupStatements is setup (SET LOCAL statements) as one statement of the
// extended protocol.
func setupStatements(setup string) []string {
	if setup == "" {
		return nil
	}
	var calls []string
	for _, st := range strings.Split(setup, "; ") {
		name, value, ok := strings.Cut(strings.TrimPrefix(st, "SET LOCAL "), " = ")
		if !ok {
			return strings.Split(setup, "; ")
		}
		calls = append(calls, "set_config('"+name+"', '"+value+"', true)")
	}
	return []string{"SELECT " + strings.Join(calls, ", ")}
}

// claimRows claims for MySQL in one short READ COMMITTED transaction (see
// mysqlDialect.claim): the due rows that no live lease holds are locked
// (SKIP LOCKED: rows another relay is claiming are passed over), a lease
// per row is recorded, and the transaction commits.
func (s *Store) claimRows(ctx context.Context, p outbox.ClaimParams) (outbox.Claim, error) {
	begin := s.db.Begin
	if rc, ok := s.db.(readCommittedDB); ok {
		// At REPEATABLE READ InnoDB's locking scan would also lock the
		// gaps between the rows, where writers insert.
		begin = rc.BeginReadCommitted
	}
	tx, err := s.beginRetrying(ctx, begin)
	if err != nil {
		return nil, s.wrap("claim: begin", err)
	}
	fail := func(op string, err error) (outbox.Claim, error) {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, s.wrap(op, err)
	}
	q := s.c.claim
	if p.AfterID > 0 && s.c.claimAfter != "" {
		q = s.c.claimAfter
	} else if _, err := tx.Exec(ctx, s.c.claimExpire); err != nil {
		return fail("claim: expire", err)
	}
	rows, err := tx.Query(ctx, q, p.AfterID, p.Limit)
	if err != nil {
		return fail("claim", err)
	}
	msgs, err := scanClaimed(rows, false, p.Limit, nil)
	if err != nil {
		return fail("claim", err)
	}
	c := &leaseClaim{s: s, msgs: msgs}
	if len(msgs) > 0 {
		c.token = newToken()
		ids := make([]int64, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		if _, err := tx.Exec(ctx, s.c.claimRecord, c.token, p.Lease.Microseconds(), jsonArray(ids)); err != nil {
			return fail("claim: lease", err)
		}
	}
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		if c.token != "" {
			c.release(context.WithoutCancel(ctx), "claim: release")
		}
		return nil, s.wrap("claim: commit", err)
	}
	return c, nil
}

// beginWith returns a begin function that also runs setup, in the same round
// trip where the DB can.
func (s *Store) beginWith(setup string) func(context.Context) (Tx, error) {
	if sb, ok := s.db.(SetupBeginner); ok {
		return func(ctx context.Context) (Tx, error) { return sb.BeginWith(ctx, setup) }
	}
	return func(ctx context.Context) (Tx, error) {
		tx, err := s.db.Begin(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, setup); err != nil {
			tx.Rollback(context.WithoutCancel(ctx))
			return nil, err
		}
		return tx, nil
	}
}

// sweep advances the low-water mark a rescan claims from, when every
// transaction that was running at the last sweep has ended (see
// postgresDialect.sweepCheck), and returns the mark. It is two statements,
// each its own transaction; when several relays sweep at once, one advances
// the mark and the others change nothing.
func (s *Store) sweep(ctx context.Context) (int64, error) {
	// Both statements are safe to repeat.
	lwm, err := onLiveConnection(ctx, s, func() (int64, error) { return s.sweepOnce(ctx) })
	if err != nil && s.classify != nil && s.classify(err) == ErrUndefinedTable {
		return 0, fmt.Errorf("outbox: claim: %w (table %q: this relay needs the tables' schema version %d; run outbox migrate): %w",
			outbox.ErrSchemaMissing, s.tables.Outbox+"_horizon", s.LatestVersion(), err)
	}
	return lwm, s.wrap("claim: sweep", err)
}

func (s *Store) sweepOnce(ctx context.Context) (int64, error) {
	if !s.seqChecked.Load() && s.c.seqCache != "" {
		// The sweep's reasoning needs ids taken in order: a backend that
		// caches sequence values hands out ids below ones already committed.
		var cache int64
		if _, err := queryRow(ctx, s.db, s.c.seqCache, nil, &cache); err != nil {
			return 0, err
		}
		if cache > 1 {
			return 0, fmt.Errorf("the id sequence of %s has CACHE %d, and the relay's low-water mark needs CACHE 1 "+
				"(ids taken in order): ALTER TABLE %s ALTER COLUMN id SET CACHE 1", s.tables.Outbox, cache, s.tables.Outbox)
		}
		s.seqChecked.Store(true)
	}
	var gen, lwm int64
	var ready bool
	found, err := queryRow(ctx, s.db, s.c.sweepCheck, nil, &gen, &lwm, &ready)
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("the low-water mark's row is missing from %s_horizon: run outbox migrate", s.tables.Outbox)
	}
	if !ready {
		return lwm, nil
	}
	var advanced int64
	found, err = queryRow(ctx, s.db, s.c.sweepAdvance, []any{gen}, &advanced)
	if err != nil || !found {
		return lwm, err // not found: another relay swept first; lwm still holds
	}
	return advanced, nil
}

// queryRow runs q and scans its first row into dest; found is false when
// there is none.
func queryRow(ctx context.Context, q Querier, sql string, args []any, dest ...any) (found bool, err error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return false, err
		}
		found = true
	}
	return found, rows.Err()
}

// beginRetrying begins a transaction, again on another connection when the
// pool handed out one that the server had closed (see onLiveConnection).
// Beginning changes nothing, so it is safe to repeat.
func (s *Store) beginRetrying(ctx context.Context, begin func(context.Context) (Tx, error)) (Tx, error) {
	return onLiveConnection(ctx, s, func() (Tx, error) { return begin(ctx) })
}

// onLiveConnection runs fn, which must be safe to repeat, again (up to 8
// times in all) while it fails on a connection the server had closed: after
// a failover or a pg_terminate_backend every idle connection of the pool is
// dead, and a pool does not check one that was used within the last second.
// A relay would otherwise pause once per dead connection, each pause twice
// the last.
func onLiveConnection[T any](ctx context.Context, s *Store, fn func() (T, error)) (T, error) {
	const attempts = 8
	var v T
	var err error
	for range attempts {
		if v, err = fn(); err == nil || s.classify == nil || s.classify(err) != ErrConnection || ctx.Err() != nil {
			return v, err
		}
	}
	return v, err
}

// scanClaimed reads the claimed rows; withDue, a ninth column gives the time
// each row came due (its next_retry_at, which the claim does not change).
// With ctids, a last column gives each row's ctid (PostgreSQL), which
// scanClaimed appends to *ctids in the order of the messages it returns.
func scanClaimed(rows Rows, withDue bool, limit int, ctids *[]string) ([]outbox.Message, error) {
	defer rows.Close()
	msgs := make([]outbox.Message, 0, min(limit, 10000)) // Claim refuses a limit below 1
	// One set of destinations serves every row, so that a row costs only
	// the values it holds. payload and headers start nil for each row, so
	// that no driver can reuse the bytes of the row before.
	var (
		m                outbox.Message
		key              textValue
		payload, headers []byte
		created, due     lenientTime
		ctid             string
	)
	dest := []any{&m.ID, &m.MsgID, &m.Topic, &key, &payload, &headers, &m.Retries, &created, &due}
	if !withDue {
		dest = dest[:len(dest)-1]
	}
	var tids []string
	if ctids != nil {
		dest = append(dest, &ctid)
	}
	for rows.Next() {
		m, key, payload, headers, created, due = outbox.Message{}, textValue{}, nil, nil, lenientTime{}, lenientTime{}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		m.Key, m.CreatedAt, m.NextRetryAt, m.Payload = key.s, created.Time, due.Time, payload
		if len(headers) > 0 {
			h, err := decodeHeaders(headers)
			if err != nil {
				return nil, err
			}
			m.Headers = h
		}
		msgs = append(msgs, m)
		if ctids != nil {
			tids = append(tids, ctid)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// The rows come in no set order; the relay publishes in id order.
	if !sortedByID(msgs) {
		sortClaimed(msgs, tids)
	}
	if ctids != nil {
		*ctids = tids
	}
	return msgs, nil
}

func sortedByID(msgs []outbox.Message) bool {
	return sort.SliceIsSorted(msgs, func(i, j int) bool { return msgs[i].ID < msgs[j].ID })
}

// sortClaimed sorts msgs by id, and ctids (nil, or one per message) with them.
func sortClaimed(msgs []outbox.Message, ctids []string) {
	order := make([]int, len(msgs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return msgs[order[i]].ID < msgs[order[j]].ID })
	sorted := make([]outbox.Message, len(msgs))
	for i, o := range order {
		sorted[i] = msgs[o]
	}
	copy(msgs, sorted)
	if ctids != nil {
		st := make([]string, len(ctids))
		for i, o := range order {
			st[i] = ctids[o]
		}
		copy(ctids, st)
	}
}

// outcomeRow is one non-sent outcome as the markOthers statements read it.
type outcomeRow struct {
	ID    int64  `json:"id"`
	Kind  int    `json:"k"`
	Delay int64  `json:"d"`
	Error string `json:"e"`
}

// split sorts outcomes into ids to mark SENT and rows for markOthers. Release
// rows are included only when the dialect must write them.
func split(msgs []outbox.Message, outcomes []outbox.Outcome, withRelease bool) (sent []int64, others []outcomeRow, err error) {
	if len(outcomes) != len(msgs) {
		return nil, nil, fmt.Errorf("outbox: finish: %d outcomes for %d messages", len(outcomes), len(msgs))
	}
	for i, o := range outcomes {
		switch o.Kind {
		case outbox.OutcomeSent:
			sent = append(sent, msgs[i].ID)
		case outbox.OutcomeRelease:
			if withRelease {
				others = append(others, outcomeRow{ID: msgs[i].ID, Kind: int(o.Kind)})
			}
		default:
			others = append(others, outcomeRow{ID: msgs[i].ID, Kind: int(o.Kind), Delay: o.Delay.Milliseconds(), Error: o.Error})
		}
	}
	return sent, others, nil
}

func (c *compiled) markOthersArgs(rows []outcomeRow, token string) (string, []any) {
	b, _ := json.Marshal(rows)
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return c.withIDs(c.markOthers, []any{string(b), token}, ids)
}

// markSentArgs: PostgreSQL's markSent takes a bigint array, the token whose
// lease it drops and the rows' ctids; the others a JSON array, or {{ids}}.
// requeued says that a row marked had been requeued (markSentRequeued).
func (c *compiled) markSentArgs(ids []int64, token string, ctids []string, requeued bool) (string, []any) {
	switch {
	case c.idList:
		return c.withIDs(c.markSent, nil, ids)
	case c.mode == claimChunks:
		if requeued && c.markSentRequeued != "" {
			return c.markSentRequeued, []any{ids, token, ctids}
		}
		return c.markSent, []any{ids, token, ctids}
	}
	return c.markSent, []any{jsonArray(ids)}
}

// leaseClaim is a batch held by a lease, recorded under token (PostgreSQL:
// the chunks of its rows; MySQL: its rows). Finish marks
// in a transaction of its own. The SENT mark applies to rows still NEW
// whether or not the lease still holds (the messages went out); the other
// outcomes only to rows the lease still holds, so that a relay that
// outlived its lease cannot undo or shorten another relay's claim.
type leaseClaim struct {
	s     *Store
	msgs  []outbox.Message
	ctids []string // PostgreSQL: each message's ctid, as the claim read it
	token string
	// prevToken and prevLast are the token and the last id of the claim
	// whose chunks this one may take over (see holdChunks), or "" and 0.
	prevToken string
	prevLast  int64
	done      bool
}

func (c *leaseClaim) Messages() []outbox.Message { return c.msgs }

func (c *leaseClaim) Finish(ctx context.Context, outcomes []outbox.Outcome) error {
	if c.done {
		return fmt.Errorf("outbox: claim already finished")
	}
	c.done = true
	if len(c.msgs) == 0 {
		return nil
	}
	s := c.s
	sent, others, err := split(c.msgs, outcomes, false)
	if err != nil {
		return err
	}
	if len(others) == 0 {
		if len(sent) == 0 {
			return c.release(ctx, "finish: release claim")
		}
		// The common case: one statement, its own transaction, which on
		// PostgreSQL also drops the lease.
		q, args := s.c.markSentArgs(sent, c.token, c.sentCtids(outcomes), requeuedSent(c.msgs, outcomes))
		if err := s.execMark(ctx, q, args); err != nil {
			return s.wrap("mark sent", err)
		}
		s.releaseAfterMark(ctx, c.msgs, outcomes)
		if s.c.mode == claimChunks {
			return nil
		}
		return c.release(ctx, "finish: release claim")
	}
	begin := s.db.Begin
	if setup := s.c.markSetup; setup != "" {
		begin = s.beginWith(setup)
	}
	tx, err := begin(ctx)
	if err != nil {
		return s.wrap("finish: begin", err)
	}
	fail := func(op string, err error) error {
		tx.Rollback(context.WithoutCancel(ctx))
		return s.wrap(op, err)
	}
	if s.c.markLock != "" {
		if err := c.lockOthers(ctx, tx, others); err != nil {
			return fail("mark failed: lock", err)
		}
	}
	// The other outcomes first: they read the lease that the SENT mark
	// (PostgreSQL) drops.
	q, args := s.c.markOthersArgs(others, c.token)
	if _, err := tx.Exec(ctx, q, args...); err != nil {
		return fail("mark failed", err)
	}
	if len(sent) > 0 {
		q, args := s.c.markSentArgs(sent, c.token, c.sentCtids(outcomes), requeuedSent(c.msgs, outcomes))
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return fail("mark sent", err)
		}
	}
	if len(sent) == 0 || s.c.mode != claimChunks {
		if _, err := tx.Exec(ctx, s.c.claimRelease, c.token); err != nil {
			return fail("finish: release claim", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return s.wrap("finish: commit", err)
	}
	s.releaseAfterMark(ctx, c.msgs, outcomes)
	return nil
}

// lockOthers locks the rows of others in tx (markLock).
func (c *leaseClaim) lockOthers(ctx context.Context, tx Tx, others []outcomeRow) error {
	ids := make([]int64, len(others))
	for i, r := range others {
		ids[i] = r.ID
	}
	q, args := c.s.c.withIDs(c.s.c.markLock, nil, ids)
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	rows.Close()
	return rows.Err()
}

// execMark runs the mark q as a transaction of its own, after the dialect's
// markSetup where it has one, in one round trip where the DB is a
// TxPipeliner.
func (s *Store) execMark(ctx context.Context, q string, args []any) error {
	if s.c.markSetup == "" {
		_, err := s.db.Exec(ctx, q, args...)
		return err
	}
	if pl, ok := s.db.(TxPipeliner); ok {
		return pl.QueryCommitted(ctx, setupStatements(s.c.markSetup), q, args, func(rows Rows) error {
			defer rows.Close()
			return rows.Err()
		})
	}
	tx, err := s.beginWith(s.c.markSetup)(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, q, args...); err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	return tx.Commit(context.WithoutCancel(ctx))
}

// sentCtids is the ctids of the messages whose outcome is SENT, in the
// order split lists their ids.
func (c *leaseClaim) sentCtids(outcomes []outbox.Outcome) []string {
	if c.ctids == nil {
		return nil
	}
	var out []string
	for i, o := range outcomes {
		if o.Kind == outbox.OutcomeSent {
			out = append(out, c.ctids[i])
		}
	}
	return out
}

// requeuedSent reports whether a message marked SENT had been requeued (its
// next_retry_at, as claimed, is past its creation).
func requeuedSent(msgs []outbox.Message, outcomes []outbox.Outcome) bool {
	for i, o := range outcomes {
		if o.Kind == outbox.OutcomeSent && msgs[i].NextRetryAt.After(msgs[i].CreatedAt) {
			return true
		}
	}
	return false
}

// Abort gives the rows back unmarked: due again at once, for any relay.
func (c *leaseClaim) Abort(ctx context.Context) error {
	if c.done {
		return nil
	}
	c.done = true
	if len(c.msgs) == 0 {
		return nil
	}
	return c.release(ctx, "abort claim")
}

func (c *leaseClaim) release(ctx context.Context, op string) error {
	_, err := c.s.db.Exec(ctx, c.s.c.claimRelease, c.token)
	return c.s.wrap(op, err)
}

// claimRange claims in one short write transaction: expired claims are
// dropped first (which also takes SQLite's write lock at once, so the
// transaction never has to upgrade), then the due rows outside every live
// claim are read and this claim's id range is recorded with its lease.
func (s *Store) claimRange(ctx context.Context, p outbox.ClaimParams) (outbox.Claim, error) {
	if p.Lease <= 0 {
		return nil, fmt.Errorf("outbox: claim: a %s store needs a positive lease", s.c.name)
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, s.wrap("claim: begin", err)
	}
	fail := func(op string, err error) (outbox.Claim, error) {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, s.wrap(op, err)
	}
	if _, err := tx.Exec(ctx, s.c.claimExpire); err != nil {
		return fail("claim: expire", err)
	}
	rows, err := tx.Query(ctx, s.c.claim, p.AfterID, p.Limit)
	if err != nil {
		return fail("claim", err)
	}
	msgs, err := scanClaimed(rows, s.c.claimReturnsDue, p.Limit, nil)
	if err != nil {
		return fail("claim", err)
	}
	c := &rangeClaim{s: s, msgs: msgs}
	if len(msgs) > 0 {
		c.token = newToken()
		if _, err := tx.Exec(ctx, s.c.claimRecord, c.token, msgs[0].ID, msgs[len(msgs)-1].ID, p.Lease.Milliseconds()); err != nil {
			return fail("claim: record", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, s.wrap("claim: commit", err)
	}
	return c, nil
}

func newToken() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// rangeClaim holds the ids from its first to its last message until it is
// finished, aborted, or its lease runs out. A relay that outlives its lease
// may mark rows another relay has claimed since; every mark is guarded by
// status = 0, so status still only moves forward, and the consumers' inbox
// absorbs the second delivery.
type rangeClaim struct {
	s     *Store
	msgs  []outbox.Message
	token string
	done  bool
}

func (c *rangeClaim) Messages() []outbox.Message { return c.msgs }

func (c *rangeClaim) Finish(ctx context.Context, outcomes []outbox.Outcome) error {
	if c.done {
		return fmt.Errorf("outbox: claim already finished")
	}
	c.done = true
	if len(c.msgs) == 0 {
		return nil
	}
	sent, others, err := split(c.msgs, outcomes, false)
	if err != nil {
		return err
	}
	tx, err := c.s.db.Begin(ctx)
	if err != nil {
		return c.s.wrap("finish: begin", err)
	}
	fail := func(op string, err error) error {
		tx.Rollback(context.WithoutCancel(ctx))
		return c.s.wrap(op, err)
	}
	if len(sent) > 0 {
		q, args := c.s.c.markSentArgs(sent, c.token, nil, false)
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return fail("mark sent", err)
		}
	}
	if len(others) > 0 {
		q, args := c.s.c.markOthersArgs(others, c.token)
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return fail("mark failed", err)
		}
	}
	if _, err := tx.Exec(ctx, c.s.c.claimRelease, c.token); err != nil {
		return fail("finish: release claim", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return c.s.wrap("finish: commit", err)
	}
	c.s.releaseAfterMark(ctx, c.msgs, outcomes)
	return nil
}

func (c *rangeClaim) Abort(ctx context.Context) error {
	if c.done || c.token == "" {
		c.done = true
		return nil
	}
	c.done = true
	_, err := c.s.db.Exec(ctx, c.s.c.claimRelease, c.token)
	return c.s.wrap("abort claim", err)
}

// timeValue scans a timestamp from any driver: time.Time (PostgreSQL, MySQL
// with parseTime) or text (SQLite, MySQL without parseTime).
type timeValue struct {
	Time  time.Time
	Valid bool
}

// timeLayouts are the forms a time column may hold: the drivers' and
// SQLite's own (strftime, CURRENT_TIMESTAMP), and the shorter ones SQLite's
// date functions also accept, which a sidecar may write.
var timeLayouts = []string{
	"2006-01-02 15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04",
	"2006-01-02T15:04",
	"2006-01-02 15:04Z07:00",
	"2006-01-02T15:04Z07:00",
	"2006-01-02",
}

func (t *timeValue) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*t = timeValue{}
		return nil
	case time.Time:
		*t = timeValue{Time: v.UTC(), Valid: true}
		return nil
	case []byte:
		return t.parse(string(v))
	case string:
		return t.parse(v)
	case int64:
		return t.number(float64(v))
	case float64:
		return t.number(v)
	}
	return fmt.Errorf("outbox: cannot read %T as a time", src)
}

// number reads v the way SQLite's date functions do with their 'auto'
// modifier: from 0 up to 5373484.5 it is a Julian day number, anything else
// Unix seconds. Only a sidecar that writes a time column of a SQLite table
// itself, as a number, stores one.
func (t *timeValue) number(v float64) error {
	const unixEpochJulianDay = 2440587.5
	if v >= 0 && v < 5373484.5 {
		v = (v - unixEpochJulianDay) * 86400
	}
	// Years 1 to 9999, as SQLite's date functions.
	if !(v >= -62135596800 && v < 253402300800) {
		return fmt.Errorf("outbox: cannot read %v as a time", v)
	}
	sec, frac := math.Modf(v)
	*t = timeValue{Time: time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC(), Valid: true}
	return nil
}

// lenientTime reads a row's time column. A value that is no time at all
// (text a sidecar wrote into a SQLite table, whose columns take anything)
// reads as no time: the message is still published, with no CloudEvents
// time attribute, instead of failing every claim that meets the row and so
// holding up every message behind it; and stats and dead list/show still
// work on it, showing no time.
type lenientTime struct{ timeValue }

func (t *lenientTime) Scan(src any) error {
	if err := t.timeValue.Scan(src); err != nil {
		t.timeValue = timeValue{}
	}
	return nil
}

func (t *timeValue) parse(s string) error {
	for _, l := range timeLayouts {
		if tm, err := time.Parse(l, s); err == nil {
			*t = timeValue{Time: tm.UTC(), Valid: true}
			return nil
		}
	}
	// A number in a SQLite column of TEXT affinity comes back as text.
	if v, err := strconv.ParseFloat(s, 64); err == nil && t.number(v) == nil {
		return nil
	}
	return fmt.Errorf("outbox: cannot parse time %q", s)
}

// textValue scans a nullable text column from any driver.
type textValue struct{ s string }

func (n *textValue) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		n.s = ""
	case string:
		n.s = v
	case []byte:
		n.s = string(v)
	case int64, uint64, float64, bool:
		n.s = fmt.Sprint(v)
	default:
		return fmt.Errorf("outbox: cannot read %T as text", src)
	}
	return nil
}
