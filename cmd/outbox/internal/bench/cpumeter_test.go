package bench

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// A name may hold spaces and parentheses; utime and stime are fields 14
	// and 15 of proc(5), here 250 and 50 ticks.
	line := "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 1000 1000 100\n"
	comm, cpu, ok := parseProcStat([]byte(line))
	if !ok || comm != "a (b) c" || cpu != 3*time.Second {
		t.Fatalf("parseProcStat = %q, %v, %v; want \"a (b) c\", 3s, true", comm, cpu, ok)
	}
	for _, bad := range []string{"", "4242 no-parens S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 u 50 0"} {
		if _, _, ok := parseProcStat([]byte(bad)); ok {
			t.Errorf("parseProcStat(%q) ok, want a failure", bad)
		}
	}
}

// TestCPUMeterByProcess reads the real /proc: this process's own CPU time,
// and that of a busy child found by its name, both grow while they run.
func TestCPUMeterByProcess(t *testing.T) {
	if !machineCPU().ok {
		t.Fatal("cannot read /proc/stat: the bench's CPU figures need Linux's /proc")
	}
	m := &cpuMeter{groups: []procGroup{{label: "outbox", self: true}, {label: "busy", comms: []string{"sh"}}, {label: "none", comms: []string{"no-such-process-name"}}}}
	child := exec.Command("sh", "-c", "while :; do :; done")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	start := m.sample()
	spin := time.Now()
	for time.Since(spin) < 300*time.Millisecond { //nolint:revive // burn CPU in this process
	}
	use := m.since(start, 1000)
	if !use.ok || len(use.procs) != 3 {
		t.Fatalf("since = %+v, want three groups", use)
	}
	// 300ms of CPU over 1000 messages is 300µs each; ticks are 10ms, so
	// allow a wide margin, but not zero.
	if use.procs[0] < 100*time.Microsecond {
		t.Errorf("this process: %v per message, want about 300µs", use.procs[0])
	}
	if use.procs[1] < 50*time.Microsecond {
		t.Errorf("the busy child: %v per message, want up to 300µs", use.procs[1])
	}
	if use.procs[2] != 0 {
		t.Errorf("a name no process has: %v, want 0", use.procs[2])
	}
	got := use.byProcess()
	for _, want := range []string{"outbox ", "busy ", "none 0.0µs", "rest "} {
		if !strings.Contains(got, want) {
			t.Errorf("byProcess = %q, want it to contain %q", got, want)
		}
	}
}

func TestNewCPUMeterGroups(t *testing.T) {
	labels := func(m *cpuMeter) string {
		var l []string
		for _, g := range m.groups {
			l = append(l, g.label)
		}
		return strings.Join(l, ",")
	}
	for _, c := range []struct{ dialect, scheme, want string }{
		{"postgres", "nats", "outbox,postgres,nats-server"},
		{"mysql", "mqtts", "outbox,mariadb,mosquitto"},
		{"sqlite", "amqp", "outbox,rabbitmq"},
		{"postgres", "kfake", "outbox,postgres"},
		{"postgres", "discard", "outbox,postgres"},
	} {
		if got := labels(newCPUMeter(c.dialect, c.scheme)); got != c.want {
			t.Errorf("newCPUMeter(%q, %q) groups %s, want %s", c.dialect, c.scheme, got, c.want)
		}
	}
}
