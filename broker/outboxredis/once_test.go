package outboxredis

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestOnce(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	key := uniquePrefix(t, rdb) + ":once:msg-1"
	ctx := context.Background()
	var runs atomic.Int32
	fn := func(context.Context) error { runs.Add(1); return nil }

	applied, err := Once(ctx, rdb, key, time.Minute, fn)
	if !applied || err != nil {
		t.Fatalf("first call: applied %v, err %v", applied, err)
	}
	applied, err = Once(ctx, rdb, key, time.Minute, fn)
	if applied || err != nil {
		t.Fatalf("second call: applied %v, err %v; want skipped", applied, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times, want 1", runs.Load())
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("key's TTL is %s, want up to 1m", ttl)
	}
}

// TestOnceFailureAllowsRetry: when fn fails the key goes, so the
// redelivery runs fn.
func TestOnceFailureAllowsRetry(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	key := uniquePrefix(t, rdb) + ":once:msg-2"
	ctx := context.Background()
	boom := errors.New("smtp: 451 try again")
	applied, err := Once(ctx, rdb, key, time.Minute, func(context.Context) error { return boom })
	if applied || !errors.Is(err, boom) {
		t.Fatalf("failing fn: applied %v, err %v", applied, err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("the key stayed after fn failed")
	}
	applied, err = Once(ctx, rdb, key, time.Minute, func(context.Context) error { return nil })
	if !applied || err != nil {
		t.Fatalf("retry: applied %v, err %v", applied, err)
	}
}

// TestOnceExpiry: the guard lasts ttl and no longer; a failure after the
// key expired and another call took it does not delete the other's key.
func TestOnceExpiry(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	key := uniquePrefix(t, rdb) + ":once:msg-3"
	ctx := context.Background()
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		// A slow first call whose key expires while it runs, and which then fails.
		_, _ = Once(ctx, rdb, key, 50*time.Millisecond, func(context.Context) error {
			<-release
			return errors.New("late failure")
		})
	}()
	time.Sleep(150 * time.Millisecond)
	applied, err := Once(ctx, rdb, key, time.Minute, func(context.Context) error { return nil })
	if !applied || err != nil {
		t.Fatalf("call after expiry: applied %v, err %v; want it to run", applied, err)
	}
	close(release)
	wg.Wait()
	if n := rdb.Exists(ctx, key).Val(); n != 1 {
		t.Error("the late failure deleted the key of the later call")
	}
}

func TestOnceBadArguments(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	fn := func(context.Context) error { t.Error("fn ran"); return nil }
	if _, err := Once(context.Background(), rdb, "k", 0, fn); err == nil {
		t.Error("ttl 0: no error")
	}
	if _, err := Once(context.Background(), rdb, "", time.Second, fn); err == nil {
		t.Error("empty key: no error")
	}
}

// TestOncePanicAllowsRetry: a panic in fn deletes the key before it goes on
// up the stack, so that the redelivery after the crash runs fn; before, the
// key stayed and the effect was skipped until the key expired.
func TestOncePanicAllowsRetry(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	key := uniquePrefix(t, rdb) + ":once:msg-4"
	ctx := context.Background()
	func() {
		defer func() {
			if p := recover(); p != "handler bug" {
				t.Fatalf("recovered %v, want fn's panic", p)
			}
		}()
		_, _ = Once(ctx, rdb, key, time.Minute, func(context.Context) error { panic("handler bug") })
		t.Fatal("Once returned after fn panicked")
	}()
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("the key stayed after fn panicked")
	}
	ran := false
	applied, err := Once(ctx, rdb, key, time.Minute, func(context.Context) error { ran = true; return nil })
	if !applied || err != nil || !ran {
		t.Fatalf("redelivery after the panic: applied %v, err %v, fn ran %v; want it to run", applied, err, ran)
	}
}

// TestOnceGoexitAllowsRetry: fn that ends its goroutine (runtime.Goexit, as
// t.FailNow does) did not finish either; the key goes as after a failure.
func TestOnceGoexitAllowsRetry(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	key := uniquePrefix(t, rdb) + ":once:msg-5"
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = Once(ctx, rdb, key, time.Minute, func(context.Context) error { runtime.Goexit(); return nil })
	}()
	<-done
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("the key stayed after fn called runtime.Goexit")
	}
}
