package outboxredis

import (
	"context"
	"testing"
)

func TestBaseline(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	d, err := Baseline(context.Background(), sharedURL+"?stream="+prefix+":{topic}", "bench", 2500, 200, 500)
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 {
		t.Errorf("Baseline took %s", d)
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
	if _, err := Baseline(context.Background(), sharedURL, "bench", 1, 200, 0); err == nil {
		t.Error("window 0: no error")
	}
}
