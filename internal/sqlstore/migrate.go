package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-go/outbox"
)

// Migrate implements outboxdriver.Store.
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
	if s.c.UnlockMigration != "" {
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
	if s.c.LockMigrations != "" && s.c.UnlockMigration == "" {
		rows, err := tx.Query(ctx, s.c.LockMigrations, lockName)
		if err != nil {
			return s.wrap("migrate: lock", err)
		}
		if err := drain(rows); err != nil {
			return s.wrap("migrate: lock", err)
		}
	}
	if _, err := tx.Exec(ctx, s.c.MigrationsTable); err != nil {
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
		if _, err := tx.Exec(ctx, s.c.RecordVersion, m.version, m.name); err != nil {
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
	if _, err := queryRow(ctx, conn, s.c.LockMigrations, []any{name, wait}, &got); err != nil {
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
	_, err := queryRow(ctx, conn, s.c.UnlockMigration, []any{name}, &released)
	return err == nil && released != nil && *released == 1
}

// SchemaVersion implements outboxdriver.Store.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	v, err := s.schemaVersion(ctx, s.db)
	if err != nil && errors.Is(err, outbox.ErrSchemaMissing) {
		return 0, nil
	}
	return v, err
}

func (s *Store) schemaVersion(ctx context.Context, q Querier) (int, error) {
	rows, err := q.Query(ctx, s.c.SchemaVersion)
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

// LatestVersion is the newest migration this build knows.
func (s *Store) LatestVersion() int { return s.c.migrations[len(s.c.migrations)-1].version }
