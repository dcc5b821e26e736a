package outboxpgx

// The calls of the driver contract (package outboxdriver) that the SQL
// engine answers for Driver and StdlibDriver.

import (
	"context"
	"database/sql"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// Dialect returns "postgres".
func (d *Driver) Dialect() string { return d.s.Dialect() }

// Tables returns the validated table names the driver works on.
func (d *Driver) Tables() outbox.Tables { return d.s.Tables() }

// Migrate creates or upgrades the tables. It is safe to run again and from
// several processes at once.
func (d *Driver) Migrate(ctx context.Context) error { return d.s.Migrate(ctx) }

// SchemaVersion returns the latest applied migration (0 when none).
func (d *Driver) SchemaVersion(ctx context.Context) (int, error) { return d.s.SchemaVersion(ctx) }

// LatestVersion returns the newest migration this build knows
// (outboxdriver.SchemaChecker).
func (d *Driver) LatestVersion() int { return d.s.LatestVersion() }

// CheckSchema compares the database with the schema this build needs
// (outboxdriver.SchemaChecker). It changes nothing.
func (d *Driver) CheckSchema(ctx context.Context) (outboxdriver.SchemaCheck, error) {
	return d.s.CheckSchema(ctx)
}

// Stats counts the messages per status and topic, through indexes only.
func (d *Driver) Stats(ctx context.Context) (outbox.Stats, error) { return d.s.Stats(ctx) }

// Backlog reads the NEW and DEAD counts without the SENT history
// (outboxdriver.BacklogReader).
func (d *Driver) Backlog(ctx context.Context) (outboxdriver.Backlog, error) {
	return d.s.Backlog(ctx)
}

// TopicBacklog reads the backlog per topic (outboxdriver.TopicBacklogReader).
func (d *Driver) TopicBacklog(ctx context.Context) ([]outboxdriver.TopicBacklog, int64, error) {
	return d.s.TopicBacklog(ctx)
}

// ListMessages lists messages by filter, oldest first, without payloads.
func (d *Driver) ListMessages(ctx context.Context, f outbox.ListFilter) ([]outbox.Message, error) {
	return d.s.ListMessages(ctx, f)
}

// GetMessage returns one message with its payload, or outbox.ErrNotFound.
func (d *Driver) GetMessage(ctx context.Context, msgID string) (outbox.Message, error) {
	return d.s.GetMessage(ctx, msgID)
}

// RetryDead moves the matching DEAD messages back to NEW with their retry
// count reset, recording note in last_error, and returns how many moved.
func (d *Driver) RetryDead(ctx context.Context, f outbox.DeadFilter, note string) (int64, error) {
	return d.s.RetryDead(ctx, f, note)
}

// DropDead deletes the matching DEAD messages and returns how many.
func (d *Driver) DropDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	return d.s.DropDead(ctx, f)
}

// SearchDead pages through the DEAD messages that match q
// (outboxdriver.DeadSearcher).
func (d *Driver) SearchDead(ctx context.Context, q outboxdriver.DeadQuery) ([]outbox.Message, int64, error) {
	return d.s.SearchDead(ctx, q)
}

// CountDead counts the DEAD messages that match q, up to limit+1
// (outboxdriver.DeadSearcher).
func (d *Driver) CountDead(ctx context.Context, q outboxdriver.DeadQuery, limit int) (outboxdriver.DeadCount, error) {
	return d.s.CountDead(ctx, q, limit)
}

// DeleteSent deletes at most limit SENT messages sent more than olderThan
// ago (database clock) and returns how many.
func (d *Driver) DeleteSent(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	return d.s.DeleteSent(ctx, olderThan, limit)
}

// DeleteConsumed deletes at most limit inbox records consumed more than
// olderThan ago (database clock), of every consumer group, and returns how
// many.
func (d *Driver) DeleteConsumed(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	return d.s.DeleteConsumed(ctx, olderThan, limit)
}

// Claim implements outboxdriver.Claimer, for the relay.
func (d *Driver) Claim(ctx context.Context, p outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
	return d.s.Claim(ctx, p)
}

// ClaimIDs implements outboxdriver.IDClaimer, for the CDC relay.
func (d *Driver) ClaimIDs(ctx context.Context, ids []int64, lease time.Duration) (outboxdriver.Claim, error) {
	return d.s.ClaimIDs(ctx, ids, lease)
}

// ClaimOverlap implements outboxdriver.ClaimOverlapper, for the relay.
func (d *Driver) ClaimOverlap() outboxdriver.ClaimOverlap { return d.s.ClaimOverlap() }

// AnyDue implements outboxdriver.DueChecker, for the relay.
func (d *Driver) AnyDue(ctx context.Context) (bool, error) { return d.s.AnyDue(ctx) }

// HoldBack implements outboxdriver.KeyOrderer, for the relay.
func (d *Driver) HoldBack(ctx context.Context, msgs []outbox.Message, p outboxdriver.HoldParams) ([]bool, error) {
	return d.s.HoldBack(ctx, msgs, p)
}

// RescanMark returns the low-water mark of the relays' rescans
// (outboxdriver.RescanMarker), for `outbox stats`.
func (d *Driver) RescanMark(ctx context.Context) (outboxdriver.RescanMark, bool, error) {
	return d.s.RescanMark(ctx)
}

// Dialect returns "postgres".
func (d *StdlibDriver) Dialect() string { return d.sql.Dialect() }

// Tables returns the validated table names the driver works on.
func (d *StdlibDriver) Tables() outbox.Tables { return d.sql.Tables() }

// Migrate creates or upgrades the tables. It is safe to run again and from
// several processes at once.
func (d *StdlibDriver) Migrate(ctx context.Context) error { return d.sql.Migrate(ctx) }

// SchemaVersion returns the latest applied migration (0 when none).
func (d *StdlibDriver) SchemaVersion(ctx context.Context) (int, error) {
	return d.sql.SchemaVersion(ctx)
}

// LatestVersion returns the newest migration this build knows
// (outboxdriver.SchemaChecker).
func (d *StdlibDriver) LatestVersion() int { return d.sql.LatestVersion() }

// CheckSchema compares the database with the schema this build needs
// (outboxdriver.SchemaChecker). It changes nothing.
func (d *StdlibDriver) CheckSchema(ctx context.Context) (outboxdriver.SchemaCheck, error) {
	return d.sql.CheckSchema(ctx)
}

// Stats counts the messages per status and topic, through indexes only.
func (d *StdlibDriver) Stats(ctx context.Context) (outbox.Stats, error) { return d.sql.Stats(ctx) }

// Backlog reads the NEW and DEAD counts without the SENT history
// (outboxdriver.BacklogReader).
func (d *StdlibDriver) Backlog(ctx context.Context) (outboxdriver.Backlog, error) {
	return d.sql.Backlog(ctx)
}

// TopicBacklog reads the backlog per topic (outboxdriver.TopicBacklogReader).
func (d *StdlibDriver) TopicBacklog(ctx context.Context) ([]outboxdriver.TopicBacklog, int64, error) {
	return d.sql.TopicBacklog(ctx)
}

// ListMessages lists messages by filter, oldest first, without payloads.
func (d *StdlibDriver) ListMessages(ctx context.Context, f outbox.ListFilter) ([]outbox.Message, error) {
	return d.sql.ListMessages(ctx, f)
}

// GetMessage returns one message with its payload, or outbox.ErrNotFound.
func (d *StdlibDriver) GetMessage(ctx context.Context, msgID string) (outbox.Message, error) {
	return d.sql.GetMessage(ctx, msgID)
}

// RetryDead moves the matching DEAD messages back to NEW with their retry
// count reset, recording note in last_error, and returns how many moved.
func (d *StdlibDriver) RetryDead(ctx context.Context, f outbox.DeadFilter, note string) (int64, error) {
	return d.sql.RetryDead(ctx, f, note)
}

// DropDead deletes the matching DEAD messages and returns how many.
func (d *StdlibDriver) DropDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	return d.sql.DropDead(ctx, f)
}

// SearchDead pages through the DEAD messages that match q
// (outboxdriver.DeadSearcher).
func (d *StdlibDriver) SearchDead(ctx context.Context, q outboxdriver.DeadQuery) ([]outbox.Message, int64, error) {
	return d.sql.SearchDead(ctx, q)
}

// CountDead counts the DEAD messages that match q, up to limit+1
// (outboxdriver.DeadSearcher).
func (d *StdlibDriver) CountDead(ctx context.Context, q outboxdriver.DeadQuery, limit int) (outboxdriver.DeadCount, error) {
	return d.sql.CountDead(ctx, q, limit)
}

// DeleteSent deletes at most limit SENT messages sent more than olderThan
// ago (database clock) and returns how many.
func (d *StdlibDriver) DeleteSent(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	return d.sql.DeleteSent(ctx, olderThan, limit)
}

// DeleteConsumed deletes at most limit inbox records consumed more than
// olderThan ago (database clock), of every consumer group, and returns how
// many.
func (d *StdlibDriver) DeleteConsumed(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	return d.sql.DeleteConsumed(ctx, olderThan, limit)
}

// Claim implements outboxdriver.Claimer, for the relay.
func (d *StdlibDriver) Claim(ctx context.Context, p outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
	return d.sql.Claim(ctx, p)
}

// ClaimIDs implements outboxdriver.IDClaimer, for the CDC relay.
func (d *StdlibDriver) ClaimIDs(ctx context.Context, ids []int64, lease time.Duration) (outboxdriver.Claim, error) {
	return d.sql.ClaimIDs(ctx, ids, lease)
}

// ClaimOverlap implements outboxdriver.ClaimOverlapper, for the relay.
func (d *StdlibDriver) ClaimOverlap() outboxdriver.ClaimOverlap { return d.sql.ClaimOverlap() }

// AnyDue implements outboxdriver.DueChecker, for the relay.
func (d *StdlibDriver) AnyDue(ctx context.Context) (bool, error) { return d.sql.AnyDue(ctx) }

// HoldBack implements outboxdriver.KeyOrderer, for the relay.
func (d *StdlibDriver) HoldBack(ctx context.Context, msgs []outbox.Message, p outboxdriver.HoldParams) ([]bool, error) {
	return d.sql.HoldBack(ctx, msgs, p)
}

// InsertTx inserts msgs, already validated, in tx, for outbox.Writer.
func (d *StdlibDriver) InsertTx(ctx context.Context, tx *sql.Tx, msgs []outbox.Message) error {
	return d.sql.InsertTx(ctx, tx, msgs)
}

// RescanMark returns the low-water mark of the relays' rescans
// (outboxdriver.RescanMarker), for `outbox stats`.
func (d *StdlibDriver) RescanMark(ctx context.Context) (outboxdriver.RescanMark, bool, error) {
	return d.sql.RescanMark(ctx)
}

var (
	_ outboxdriver.Store              = (*Driver)(nil)
	_ outboxdriver.SchemaChecker      = (*Driver)(nil)
	_ outboxdriver.BacklogReader      = (*Driver)(nil)
	_ outboxdriver.TopicBacklogReader = (*Driver)(nil)
	_ outboxdriver.DeadSearcher       = (*Driver)(nil)
	_ outboxdriver.IDClaimer          = (*Driver)(nil)
	_ outboxdriver.ClaimOverlapper    = (*Driver)(nil)
	_ outboxdriver.DueChecker         = (*Driver)(nil)
	_ outboxdriver.KeyOrderer         = (*Driver)(nil)
	_ outboxdriver.RescanMarker       = (*Driver)(nil)
)

var (
	_ outboxdriver.Store              = (*StdlibDriver)(nil)
	_ outboxdriver.SchemaChecker      = (*StdlibDriver)(nil)
	_ outboxdriver.BacklogReader      = (*StdlibDriver)(nil)
	_ outboxdriver.TopicBacklogReader = (*StdlibDriver)(nil)
	_ outboxdriver.DeadSearcher       = (*StdlibDriver)(nil)
	_ outboxdriver.IDClaimer          = (*StdlibDriver)(nil)
	_ outboxdriver.ClaimOverlapper    = (*StdlibDriver)(nil)
	_ outboxdriver.DueChecker         = (*StdlibDriver)(nil)
	_ outboxdriver.KeyOrderer         = (*StdlibDriver)(nil)
	_ outboxdriver.RescanMarker       = (*StdlibDriver)(nil)
)
