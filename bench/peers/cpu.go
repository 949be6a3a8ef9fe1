package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The servers' CPU over the measured window, read from /proc/PID/stat
// (utime+stime, in USER_HZ ticks, 100 on every Linux Go supports) as
// `raftlock bench --server-pids` reads it, so that the two compare.

type procCPU struct {
	Name       string  `json:"name"`
	PID        int     `json:"pid"`
	CPUMs      float64 `json:"cpu_ms"`
	UsPerCycle float64 `json:"us_per_cycle"`
}

type serverProc struct {
	name string
	pid  int
}

// parseServerPids reads NAME=PID,... or PID,...
func parseServerPids(s string) ([]serverProc, error) {
	var out []serverProc
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		name, p, ok := strings.Cut(f, "=")
		if !ok {
			name, p = f, f
		}
		pid, err := strconv.Atoi(p)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("--server-pids: %q is not PID or NAME=PID", f)
		}
		out = append(out, serverProc{name, pid})
	}
	return out, nil
}

// cpuOf is the CPU each process has used so far.
func cpuOf(procs []serverProc) ([]time.Duration, error) {
	out := make([]time.Duration, len(procs))
	for i, p := range procs {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
		if err != nil {
			return nil, fmt.Errorf("cpu of %s: %w", p.name, err)
		}
		s := string(b)
		j := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[j+1:])
		if j < 0 || len(f) < 13 {
			return nil, fmt.Errorf("cpu of %s: unreadable stat %q", p.name, s)
		}
		u, err1 := strconv.ParseUint(f[11], 10, 64)
		st, err2 := strconv.ParseUint(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("cpu of %s: unreadable stat %q", p.name, s)
		}
		out[i] = time.Duration(u+st) * time.Second / 100
	}
	return out, nil
}
