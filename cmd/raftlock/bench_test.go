package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// TestCLIBench runs bench for about a second per row against a real
// three-node cluster and checks the shape of its report and that it saw no
// safety slip. Throughput is not asserted: it depends on the machine.
func TestCLIBench(t *testing.T) {
	cl := testenv.Start(t, 3)
	eps := strings.Join(cl.Endpoints(), ",")
	profile := filepath.Join(t.TempDir(), "bench.pprof")
	table := regexp.MustCompile(`(?s)^4 workers, \d+ locks \((un)?contended\), ttl 5s, [0-9.]+m?s, via .+\n` +
		`cycles: [1-9]\d*, [0-9.]+ cycles/s\n\n` +
		`call +ok +ok/s +p50 ms +p95 ms +p99 ms +max ms\n` +
		`acquire +[1-9]\d* .*\n(renew +[1-9]\d* .*\n)?release +[1-9]\d* .*\n\n` +
		`errors: .*\nsafety slips: none\n$`)
	for _, tc := range []struct {
		name  string
		args  []string
		renew bool
	}{
		{"uncontended http", []string{"--workers", "4"}, false},
		{"contended client renew", []string{"--workers", "4", "--locks", "2", "--via", "client", "--renew"}, true},
		{"more locks than workers", []string{"--workers", "4", "--locks", "9", "--renew"}, true},
		// The cluster's nodes run in this test's process: its CPU is theirs.
		{"json", []string{"--workers", "4", "--locks", "1", "--json", "--server-pids", "self=" + strconv.Itoa(os.Getpid()), "--cpuprofile", profile}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"bench", "--endpoints", eps, "--duration", "1s", "--ttl", "5s", "--progress", "300ms"}, tc.args...)
			r := runCLI(t, nil, args...)
			if r.code != exitOK {
				t.Fatalf("exit %d, want 0; stderr %q", r.code, r.stderr)
			}
			if n := strings.Count(r.stderr, "cycles/s"); n < 2 {
				t.Errorf("stderr has %d progress lines, want at least 2: %q", n, r.stderr)
			}
			if !strings.Contains(tc.name, "json") {
				if !table.MatchString(r.stdout) {
					t.Errorf("report does not match %s:\n%s", table, r.stdout)
				}
				if got := strings.Contains(r.stdout, "\nrenew "); got != tc.renew {
					t.Errorf("renew row shown: %v, want %v", got, tc.renew)
				}
				return
			}
			var rep benchReport
			decode(t, r.stdout, &rep)
			if rep.Workers != 4 || rep.Locks != 1 || !rep.Contended || rep.TTLMs != 5000 || rep.Via != "http" {
				t.Errorf("header %+v", rep)
			}
			if rep.Cycles <= 0 || rep.CyclesPerSec <= 0 || rep.Ops["acquire"].Count < rep.Cycles || rep.Ops["release"].Count != rep.Cycles {
				t.Errorf("counts %+v", rep)
			}
			if _, ok := rep.Ops["renew"]; ok {
				t.Errorf("renew stats without --renew: %+v", rep.Ops)
			}
			a := rep.Ops["acquire"]
			if !(0 < a.P50 && a.P50 <= a.P95 && a.P95 <= a.P99 && a.P99 <= a.Max) {
				t.Errorf("acquire percentiles out of order: %+v", a)
			}
			if rep.SlipTotal != 0 || len(rep.Slips) != 4 {
				t.Errorf("slips %v (total %d), want the four kinds at 0", rep.Slips, rep.SlipTotal)
			}
			if c := rep.CPU; c == nil || c.Requests < 2*rep.Cycles || c.Entries < uint64(rep.Cycles) ||
				len(c.Processes) != 1 || c.Processes[0].Name != "self" || c.TotalMs <= 0 || c.UsPerCycle <= 0 {
				t.Errorf("cpu report %+v", c)
			}
			// In-process nodes have no raft metrics on /metrics: no rounds
			// (TestBenchCountsRaftRounds runs real nodes).
			if c := rep.CPU; c == nil || c.Rounds != 0 {
				t.Errorf("Raft rounds in the cpu report %+v", c)
			}
			// A CPU profile is gzipped protobuf: stopped and closed, it is whole.
			if b, err := os.ReadFile(profile); err != nil || len(b) < 100 || b[0] != 0x1f || b[1] != 0x8b {
				t.Errorf("--cpuprofile wrote %d bytes (%v), want a gzipped profile", len(b), err)
			}
		})
	}
}

// TestCLIBenchUsage: bad flags are usage errors, and no leader anywhere is
// "unavailable".
func TestCLIBenchUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--workers", "0"}, exitUsage, "--workers must be at least 1"},
		{[]string{"--ttl", "100ms"}, exitUsage, "--ttl must be between 500ms and 1h, not 100ms"},
		{[]string{"--via", "grpc"}, exitUsage, "--via must be http or client"},
		{[]string{"--locks", "-1"}, exitUsage, "--locks must not be negative"},
		{[]string{"--server-pids", "n1=x"}, exitUsage, "is not PID or NAME=PID"},
		{[]string{"--server-pids", "n1=1073741824"}, exitUsage, "cpu of pid 1073741824"},
		{[]string{"--cpuprofile", "/nonexistent/dir/p", "--endpoints", "http://127.0.0.1:1", "--via", "client"}, exitUsage, "--cpuprofile: open /nonexistent/dir/p"},
		{[]string{"--endpoints", "http://127.0.0.1:1", "--timeout", "300ms"}, exitUnavailable, "no leader found"},
	} {
		r := runCLI(t, nil, append([]string{"bench"}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.err) {
			t.Errorf("bench %v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.err)
		}
	}
	if r := runCLI(t, nil, "bench", "--help"); r.code != exitOK || !strings.Contains(r.stdout, "Examples:\n  raftlock bench") {
		t.Errorf("--help: exit %d, stdout %q", r.code, r.stdout)
	}
}

// brokenTarget grants every acquire, always with the same token, as a
// cluster without mutual exclusion would. The first two acquires answer
// together and renews are slow, so that two workers surely hold at once.
type brokenTarget struct {
	mu    sync.Mutex
	calls int
	both  chan struct{}
}

func (b *brokenTarget) acquire(ctx context.Context, _, _, _ string, _ time.Duration) (uint64, error) {
	b.mu.Lock()
	b.calls++
	if b.calls == 2 {
		close(b.both)
	}
	b.mu.Unlock()
	select {
	case <-b.both:
	case <-ctx.Done():
	}
	return 7, nil
}
func (b *brokenTarget) renew(context.Context, string, string, time.Duration) (uint64, error) {
	time.Sleep(100 * time.Millisecond)
	return 8, nil
}
func (b *brokenTarget) release(context.Context, string, string) error { return nil }
func (b *brokenTarget) describe() string                              { return "broken" }
func (b *brokenTarget) close()                                        {}

// TestBenchSeesSlips: the slip detector catches two holders at once, a
// token that does not go up, and a renew that changes the token.
func TestBenchSeesSlips(t *testing.T) {
	cfg := benchConfig{workers: 2, locks: 1, duration: 300 * time.Millisecond, ttl: 10 * time.Second, renew: true, prefix: "x/"}
	rep := newBench(cfg, &brokenTarget{both: make(chan struct{})}, time.Second).run(context.Background(), nil)
	for _, k := range []string{slipDoubleHolder, slipTokenDown, slipRenewToken} {
		if rep.Slips[k] == 0 {
			t.Errorf("no %s slip counted: %v", k, rep.Slips)
		}
	}
	if rep.SlipTotal == 0 {
		t.Errorf("slip total 0")
	}
}
