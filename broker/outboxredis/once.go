package outboxredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Once runs fn unless key is already set in Redis, for consumers whose effect
// has no database transaction to share with an inbox table (sending an
// e-mail, calling an API) and for which a rare repeat is acceptable.
//
// It sets key with SET NX and an expiry of ttl. When the key was already
// there, another delivery of the same message ran (or is running) fn, and
// Once returns (false, nil) without calling fn. Otherwise it calls fn; when
// fn fails, it deletes the key again (only if it still holds this call's own
// token), so that the redelivery can run fn, and returns (false, fn's error).
// When fn panics, it deletes the key the same way and the panic goes on.
// When fn succeeds it returns (true, nil) and the key stays until it expires.
// Use the message's msg_id in the key, e.g. "once:billing:" + m.MsgID.
//
// The guard is weaker than the inbox table, and never the only guard for
// money or anything else that must not happen twice:
//   - The key expires after ttl; a copy of the message that arrives later
//     (a relay that crashed between publish and mark and ran again hours
//     later, an operator's `outbox dead retry`) runs fn again. Choose ttl
//     longer than any redelivery can take.
//   - If fn runs longer than ttl, a second delivery can run it concurrently.
//   - Redis replicates asynchronously and may persist only every second: a
//     failover or a restart can lose a key that was set, and fn runs again.
//   - If the process dies after fn's effect and before Redis has the key,
//     or fn's effect half happened when it returned an error, Redis cannot
//     know.
//
// Once is for effects where a rare repeat is acceptable but a routine one is
// not. When the effect is a database write, use the inbox table
// (outbox.Inbox.Handler), which commits the record in the same transaction.
//
// ttl must be at least 1ms. An error talking to Redis is returned as it is,
// without fn having run (applied is false).
func Once(ctx context.Context, rdb redis.UniversalClient, key string, ttl time.Duration, fn func(ctx context.Context) error) (applied bool, err error) {
	if ttl < time.Millisecond {
		return false, fmt.Errorf("outboxredis: Once: ttl is %s; it must be at least 1ms, and longer than any redelivery can take", ttl)
	}
	if key == "" {
		return false, errors.New("outboxredis: Once: the key is empty; use one derived from the msg_id")
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	set, err := rdb.SetNX(ctx, key, token, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("outboxredis: Once: SET %s NX: %w", key, err)
	}
	if !set {
		return false, nil
	}
	// The key goes unless fn returned nil: after an error, and also when fn
	// panics or ends its goroutine (runtime.Goexit), since the process that
	// crashed on it gets the message again and must run fn then. The
	// deferred delete runs while a panic unwinds, without recovering it.
	finished := false
	defer func() {
		if finished {
			return
		}
		// The key must go even when ctx has ended, or the redelivery would
		// be skipped until the key expires.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if derr := deleteIfTokenScript.Run(dctx, rdb, []string{key}, token).Err(); derr != nil {
			err = errors.Join(err, fmt.Errorf("outboxredis: Once: could not delete %s after the failure, so a redelivery is skipped until it expires: %w", key, derr))
		}
	}()
	if err := fn(ctx); err != nil {
		return false, err
	}
	finished = true
	return true, nil
}

// deleteIfTokenScript deletes KEYS[1] only if it holds ARGV[1], so that a
// call whose key expired meanwhile does not delete the key of another call.
var deleteIfTokenScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('DEL', KEYS[1])
end
return 0
`)
