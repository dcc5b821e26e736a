package outboxredis

import (
	"context"
	"testing"

	"github.com/outbox-go/outbox/internal/benchbaseline"
)

func TestBaseline(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	d, err := baseline(context.Background(), sharedURL+"?stream="+prefix+":{topic}", "bench", 2500, 200, 500)
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 {
		t.Errorf("baseline took %s", d)
	}
	entries, err := rdb.XRangeN(context.Background(), prefix+":bench", "-", "+", 1).Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("XRANGE: %v %v", entries, err)
	}
	if n := rdb.XLen(context.Background(), prefix+":bench").Val(); n != 2500 {
		t.Errorf("stream holds %d entries, want 2500", n)
	}
	m, err := decodeEntry(entries[0].Values)
	if err != nil || m.MsgID != "baseline-0" || len(m.Payload) != 200 {
		t.Errorf("first entry: %+v, %v", m, err)
	}
	if _, err := baseline(context.Background(), sharedURL, "bench", 1, 200, 0); err == nil {
		t.Error("window 0: no error")
	}
}

// TestBaselineRegistered: the baseline is registered for outbox bench under
// every scheme the Publisher takes.
func TestBaselineRegistered(t *testing.T) {
	for _, scheme := range []string{"redis", "rediss"} {
		if _, ok := benchbaseline.Lookup(scheme); !ok {
			t.Errorf("no baseline registered for %s:", scheme)
		}
	}
}
