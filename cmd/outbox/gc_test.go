package main

import (
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if got := tuneGC(getenv); got != relayGCPercent {
		t.Fatalf("without GOGC: %d, want %d", got, relayGCPercent)
	}
	if now := debug.SetGCPercent(100); now != relayGCPercent {
		t.Fatalf("the collector's target is %d, want %d", now, relayGCPercent)
	}
	// GOGC set: the runtime read it at start; tuneGC leaves it alone.
	env["GOGC"] = "50"
	debug.SetGCPercent(50)
	if got := tuneGC(getenv); got != 50 {
		t.Fatalf("with GOGC=50: %d, want 50 left alone", got)
	}
	if now := debug.SetGCPercent(50); now != 50 {
		t.Fatalf("the collector's target is %d after tuneGC with GOGC set, want 50", now)
	}
}
