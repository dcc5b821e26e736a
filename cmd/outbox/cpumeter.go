package main

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// cpuSample is the machine's cumulative CPU time from /proc/stat (Linux): how
// long all cores together were busy, whoever ran. Every service of the bench
// (database, broker, relay) shares this machine, so the busy core-seconds a
// phase spends per message show what it costs the machine as a whole.
type cpuSample struct {
	busy time.Duration
	at   time.Time
	ok   bool
}

// userHz is the unit of /proc/stat; Linux reports USER_HZ = 100 on every
// architecture Go supports.
const userHz = 100

func sampleCPU() cpuSample {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuSample{}
	}
	defer f.Close()
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
	perMsg time.Duration // busy core-time per message
	util   float64       // busy share of all cores, 0..1
	ok     bool
}

func cpuSince(start cpuSample, n int64) cpuUse {
	end := sampleCPU()
	if !start.ok || !end.ok || n <= 0 {
		return cpuUse{}
	}
	busy, wall := end.busy-start.busy, end.at.Sub(start.at)
	if wall <= 0 {
		return cpuUse{}
	}
	return cpuUse{perMsg: busy / time.Duration(n), util: busy.Seconds() / (wall.Seconds() * float64(runtime.NumCPU())), ok: true}
}
