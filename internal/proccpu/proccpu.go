// Package proccpu reads a process's CPU time from /proc/PID/stat: what
// raftlock bench and the benchmarks measure servers' CPU per operation by.
package proccpu

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. Linux
// fixes it at 100 for every architecture Go supports; sysconf(_SC_CLK_TCK)
// would need cgo to say the same.
const ClockTicks = 100

// Used is the CPU time (user+system) process pid has used so far.
func Used(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	ticks, err := ParseStat(string(b))
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	return time.Duration(ticks) * time.Second / ClockTicks, nil
}

// ParseStat is utime+stime, in clock ticks, of one /proc/PID/stat
// line. The command name (field 2) is in parentheses and may itself hold
// spaces and parentheses, so fields are counted from the last ')'.
func ParseStat(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q: no command name", stat)
	}
	// After ") " come field 3 (state) onwards: utime is field 14, stime 15.
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	utime, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat utime %q: %w", f[11], err)
	}
	stime, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat stime %q: %w", f[12], err)
	}
	return utime + stime, nil
}
