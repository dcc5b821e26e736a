package outbox

import (
	"errors"
	"testing"
)

func TestUniqueKeyAndCompareAndSet(t *testing.T) {
	t.Parallel()
	errDup := errors.New("duplicate key")
	errOther := errors.New("disk full")
	isDup := func(err error) bool { return errors.Is(err, errDup) }
	for _, c := range []struct {
		err     error
		applied bool
		wantErr error
	}{{nil, true, nil}, {errDup, false, nil}, {errOther, false, errOther}} {
		applied, err := UniqueKey(c.err, isDup)
		if applied != c.applied || !errors.Is(err, c.wantErr) || (c.wantErr == nil && err != nil) {
			t.Errorf("UniqueKey(%v) = %v, %v; want %v, %v", c.err, applied, err, c.applied, c.wantErr)
		}
	}
	if _, err := UniqueKey(errDup, nil); !errors.Is(err, errDup) {
		t.Errorf("UniqueKey with no predicate swallowed %v", err)
	}
	for _, c := range []struct {
		n       int64
		err     error
		applied bool
	}{{1, nil, true}, {3, nil, true}, {0, nil, false}, {1, errOther, false}} {
		applied, err := CompareAndSet(c.n, c.err)
		if applied != c.applied || !errors.Is(err, c.err) || (c.err == nil && err != nil) {
			t.Errorf("CompareAndSet(%d, %v) = %v, %v", c.n, c.err, applied, err)
		}
	}
}
