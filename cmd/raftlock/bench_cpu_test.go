package main

import (
	"os"
	"syscall"
	"testing"
	"time"
)

func TestParseProcStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       uint64
	}{
		{"plain", "4242 (raftlock) S 1 4242 4242 0 -1 4194560 1234 0 0 0 731 209 0 0 20 0 12 0 99 1 2 3\n", 940},
		// A command name may hold spaces and parentheses: fields count from the last ')'.
		{"odd comm", "7 (a) b (c) d) R 1 7 7 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 1 1 1\n", 11},
		{"large", "1 (x) S 0 1 1 0 -1 0 0 0 0 0 18446744073709551 0 0 0 20 0 1 0 1 1 1", 18446744073709551},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStatCPU(tc.stat)
			if err != nil || got != tc.want {
				t.Errorf("parseProcStatCPU = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "12 raftlock S 1", "1 (x) S 0 1 1 0 -1 0 0 0 0 0 5", "1 (x) S 0 1 1 0 -1 0 0 0 0 0 u 6 0", "1 (x) S 0 1 1 0 -1 0 0 0 0 0 5 -6 0"} {
		if got, err := parseProcStatCPU(bad); err == nil {
			t.Errorf("parseProcStatCPU(%q) = %d, want an error", bad, got)
		}
	}
}

// TestProcCPUMatchesRusage reads this process's own /proc stat and checks it
// against getrusage taken around it: both count the same CPU, /proc in clock
// ticks.
func TestProcCPUMatchesRusage(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	// Burn some CPU so that the figures are not all zero.
	for x, i := 0, 0; i < 50_000_000; i++ {
		x ^= i * 31
		if i == -1 {
			t.Log(x)
		}
	}
	lo := rusage()
	got, err := procCPU(os.Getpid())
	hi := rusage()
	if err != nil {
		t.Fatal(err)
	}
	const tick = time.Second / clockTicks
	if got < lo-2*tick || got > hi+2*tick {
		t.Errorf("procCPU = %v, getrusage around it %v..%v", got, lo, hi)
	}
	if _, err := procCPU(1 << 30); err == nil {
		t.Error("procCPU of a pid that cannot exist: no error")
	}
}

func TestParseServerPids(t *testing.T) {
	got, err := parseServerPids("n1=10, n2=20,30")
	if err != nil {
		t.Fatal(err)
	}
	want := []serverProc{{"n1", 10}, {"n2", 20}, {"30", 30}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %v, want %v", got, want)
		}
	}
	for _, bad := range []string{"n1=x", "n1=0", "-3", "n1=1,n1=2"} {
		if _, err := parseServerPids(bad); err == nil {
			t.Errorf("parseServerPids(%q): no error", bad)
		}
	}
}

func TestCPUReportRoles(t *testing.T) {
	m := &cpuMeter{procs: []serverProc{{"n1", 1}, {"n2", 2}, {"n3", 3}}}
	before := cpuSample{cpu: []time.Duration{time.Second, 0, 0}, commit: 100, leader: "n2"}
	after := cpuSample{cpu: []time.Duration{1200 * time.Millisecond, 400 * time.Millisecond, 100 * time.Millisecond}, commit: 300, leader: "n2"}
	r := m.report(before, after, 100, 200)
	if r.TotalMs != 700 || r.UsPerCycle != 7000 || r.Entries != 200 || r.Requests != 200 {
		t.Errorf("totals %+v", r)
	}
	n1, n2 := r.Processes[0], r.Processes[1]
	if n2.Role != "leader" || n2.UsPerRequest != 2000 || n2.UsPerCycle != 4000 {
		t.Errorf("leader %+v", n2)
	}
	if n1.Role != "follower" || n1.UsPerEntry != 1000 || n1.CPUMs != 200 {
		t.Errorf("follower %+v", n1)
	}
	// Names that are no node's id (etcd members, a bare pid): no roles.
	m.procs = []serverProc{{"e1", 1}, {"e2", 2}, {"e3", 3}}
	for _, p := range m.report(before, after, 100, 200).Processes {
		if p.Role != "" || p.UsPerRequest != 0 || p.UsPerEntry != 0 {
			t.Errorf("process %+v has a role", p)
		}
	}
}
