package outbox

// Delivery is at least once, so a consumer must make its effect idempotent.
// There are four common ways; the inbox (Inbox.Process, Inbox.Handler) is the
// default and the only one that works for any effect. The other three use
// something the effect already has:
//
//   - a business unique key: the effect's own row has a unique key taken from
//     the message (a payment id), and a unique violation means "already
//     done": UniqueKey, with the driver's IsUniqueViolation;
//   - a state-machine compare-and-set: an UPDATE guarded by the state the
//     message expects (`... SET status = 'paid' WHERE id = ? AND status =
//     'new'`), where 0 rows means "already done": CompareAndSet;
//   - Redis SET NX on the msg_id before the effect: outboxredis.Once, fast
//     but with a window for loss (the key expires, a failover can drop it),
//     so never the only guard for money.

// UniqueKey reads the result of inserting an effect whose unique key comes
// from the message: applied is true when err is nil; a unique violation
// (isUnique(err), e.g. outboxpgx.IsUniqueViolation) means the effect already
// exists, so applied is false and the error nil, and the caller acks. Any
// other error is returned.
//
// isUnique should match only the key taken from the message: a violation
// of another unique constraint of the same table (an email already taken)
// is a real failure, not a repeat, and would be acked as one. With
// PostgreSQL, compare the *pgconn.PgError's ConstraintName.
//
// On PostgreSQL a unique violation aborts the transaction it happens in:
// insert with ON CONFLICT DO NOTHING and use CompareAndSet on the row count,
// or run the insert in a transaction (or savepoint) of its own. MySQL,
// MariaDB and SQLite roll back only the failed statement.
func UniqueKey(err error, isUnique func(error) bool) (applied bool, _ error) {
	switch {
	case err == nil:
		return true, nil
	case isUnique != nil && isUnique(err):
		return false, nil
	}
	return false, err
}

// CompareAndSet reads the result of a guarded UPDATE (or an INSERT ... ON
// CONFLICT DO NOTHING): one or more rows changed means the effect was applied
// now; zero rows means it was applied before (the state has already moved
// on), so applied is false and the error nil, and the caller acks. Pass the
// statement's affected-row count and error as they come.
//
// Zero rows also means that the row the UPDATE guards does not exist (yet):
// where a message can arrive before the row it updates (from another
// producer, or after the row was deleted), tell the two apart, or that
// message is acked without its effect.
func CompareAndSet(rowsAffected int64, err error) (applied bool, _ error) {
	if err != nil {
		return false, err
	}
	return rowsAffected > 0, nil
}
