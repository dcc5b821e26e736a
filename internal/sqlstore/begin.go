package sqlstore

import (
	"context"
	"strings"
)

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

// claimSetupStatements is claimSetup as one statement of the extended
// protocol: SET LOCAL name = value becomes set_config(name, value, true).
func (c *compiled) claimSetupStatements() []string {
	return setupStatements(c.ClaimSetup)
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
