package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// cpuSample is the machine's cumulative CPU time from /proc/stat (Linux): how
// long all cores together were busy, whoever ran. Every service of the bench
// (database, broker, relay) shares this machine, so the busy core-seconds a
// phase spends per message show what it costs the machine as a whole.
type cpuSample struct {
	busy  time.Duration
	procs []time.Duration // CPU time of each procGroup, in the meter's order
	at    time.Time
	ok    bool
}

// userHz is the unit of /proc/stat; Linux reports USER_HZ = 100 on every
// architecture Go supports.
const userHz = 100

func (m *cpuMeter) sample() cpuSample {
	s := machineCPU()
	if s.ok && m != nil {
		s.procs = m.procTimes()
	}
	return s
}

func machineCPU() cpuSample {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuSample{}
	}
	defer f.Close() //nolint:errcheck // read-only /proc file
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return cpuSample{}
	}
	fields := strings.Fields(sc.Text())
	// cpu user nice system idle iowait irq softirq steal ...
	if len(fields) < 8 || fields[0] != "cpu" {
		return cpuSample{}
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		v, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return cpuSample{}
		}
		ticks += v
	}
	return cpuSample{busy: time.Duration(ticks) * time.Second / userHz, at: time.Now(), ok: true}
}

// cpuUse is the machine's CPU use over one phase of n messages.
type cpuUse struct {
	perMsg time.Duration   // busy core-time per message
	util   float64         // busy share of all cores, 0..1
	procs  []time.Duration // per message, for each of the meter's groups
	labels []string
	ok     bool
}

func (m *cpuMeter) since(start cpuSample, n int64) cpuUse {
	end := m.sample()
	if !start.ok || !end.ok || n <= 0 {
		return cpuUse{}
	}
	busy, wall := end.busy-start.busy, end.at.Sub(start.at)
	if wall <= 0 {
		return cpuUse{}
	}
	u := cpuUse{perMsg: busy / time.Duration(n), util: busy.Seconds() / (wall.Seconds() * float64(runtime.NumCPU())), ok: true}
	if m != nil && len(start.procs) == len(m.groups) && len(end.procs) == len(m.groups) {
		for i, g := range m.groups {
			u.labels = append(u.labels, g.label)
			u.procs = append(u.procs, max(end.procs[i]-start.procs[i], 0)/time.Duration(n))
		}
	}
	return u
}

// byProcess formats the per-message CPU time of each process group, and the
// rest of the machine's busy time (the kernel's own work, other processes).
func (u cpuUse) byProcess() string {
	if !u.ok || len(u.procs) == 0 {
		return ""
	}
	var b strings.Builder
	rest := u.perMsg
	for i, d := range u.procs {
		fmt.Fprintf(&b, "%s %s, ", u.labels[i], micros(d))
		rest -= d
	}
	fmt.Fprintf(&b, "rest %s", micros(max(rest, 0)))
	return b.String()
}

// A procGroup is a set of processes whose CPU time the bench reports apart:
// this process, the database server, the broker.
type procGroup struct {
	label string
	self  bool     // this process
	comms []string // or every process with one of these names (/proc/PID/comm)
}

// cpuMeter samples the machine's CPU time and that of its process groups.
// On a machine where the database and the broker run beside the relay (as on
// the project's 2-core machine), the split shows which of them the cores
// went to; a server elsewhere shows as 0.
type cpuMeter struct {
	groups []procGroup
}

// newCPUMeter measures this process and the local processes of the database
// of dialect and the broker of scheme (a URL scheme of --broker).
func newCPUMeter(dialect, scheme string) *cpuMeter {
	m := &cpuMeter{groups: []procGroup{{label: "outbox", self: true}}}
	switch dialect {
	case "postgres":
		m.groups = append(m.groups, procGroup{label: "postgres", comms: []string{"postgres"}})
	case "mysql":
		m.groups = append(m.groups, procGroup{label: "mariadb", comms: []string{"mariadbd", "mysqld"}})
	}
	if g, ok := brokerProcs[scheme]; ok {
		m.groups = append(m.groups, g)
	}
	return m
}

// brokerProcs names each broker's server process, by URL scheme (kfake runs
// in this process).
var brokerProcs = map[string]procGroup{
	"nats":   {label: "nats-server", comms: []string{"nats-server"}},
	"mqtt":   {label: "mosquitto", comms: []string{"mosquitto"}},
	"mqtts":  {label: "mosquitto", comms: []string{"mosquitto"}},
	"redis":  {label: "redis-server", comms: []string{"redis-server"}},
	"rediss": {label: "redis-server", comms: []string{"redis-server"}},
	"amqp":   {label: "rabbitmq", comms: []string{"beam.smp"}},
	"amqps":  {label: "rabbitmq", comms: []string{"beam.smp"}},
}

// procTimes reads the CPU time (user and system, all threads) of each group
// from /proc: each process's stat line once.
func (m *cpuMeter) procTimes() []time.Duration {
	out := make([]time.Duration, len(m.groups))
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, t, ok := procStat(pid)
		if !ok {
			continue
		}
		if i := m.group(pid == self, comm); i >= 0 {
			out[i] += t
		}
	}
	return out
}

// group is the index of the group a process belongs to, or -1.
func (m *cpuMeter) group(self bool, comm string) int {
	for i, g := range m.groups {
		if g.self {
			if self {
				return i
			}
			continue
		}
		if !self && slices.Contains(g.comms, comm) {
			return i
		}
	}
	return -1
}

// procStat reads a process's name and its CPU time (utime + stime) from
// /proc/PID/stat; a process that ended meanwhile gives "".
func procStat(pid int) (comm string, cpu time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	return parseProcStat(b)
}

// parseProcStat parses "PID (COMM) STATE PPID ... UTIME STIME ...": COMM may
// hold spaces and parentheses, so the fields start after the last ')'.
func parseProcStat(b []byte) (comm string, cpu time.Duration, ok bool) {
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return "", 0, false
	}
	fields := strings.Fields(string(b[closing+1:]))
	// fields[0] is STATE (field 3 of proc(5)); UTIME and STIME are 14 and 15.
	if len(fields) < 13 {
		return "", 0, false
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, false
	}
	return string(b[open+1 : closing]), time.Duration(utime+stime) * time.Second / userHz, true
}
