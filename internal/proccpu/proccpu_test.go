package proccpu

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
			got, err := ParseStat(tc.stat)
			if err != nil || got != tc.want {
				t.Errorf("ParseStat = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "12 raftlock S 1", "1 (x) S 0 1 1 0 -1 0 0 0 0 0 5", "1 (x) S 0 1 1 0 -1 0 0 0 0 0 u 6 0", "1 (x) S 0 1 1 0 -1 0 0 0 0 0 5 -6 0"} {
		if got, err := ParseStat(bad); err == nil {
			t.Errorf("ParseStat(%q) = %d, want an error", bad, got)
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
	got, err := Used(os.Getpid())
	hi := rusage()
	if err != nil {
		t.Fatal(err)
	}
	const tick = time.Second / ClockTicks
	if got < lo-2*tick || got > hi+2*tick {
		t.Errorf("Used = %v, getrusage around it %v..%v", got, lo, hi)
	}
	if _, err := Used(1 << 30); err == nil {
		t.Error("Used of a pid that cannot exist: no error")
	}
}
