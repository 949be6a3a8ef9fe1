package client

// The renew load of many locks held through sessions versus as separate
// leases, on real `raftlock serve` processes on loopback. A benchmark only so
// that `go test` never runs it by accident; it runs once and takes minutes:
//
//	go test -run=NONE -bench=RenewLoad -benchtime=1x -timeout=30m -v ./client/
//
// The nodes run testenv.Binary: ./cmd/raftlock built once, or the binary
// RAFTLOCK_BIN names.
// RAFTLOCK_RENEW_LOCKS (default 10,000), RAFTLOCK_RENEW_SESSIONS (10) and
// RAFTLOCK_RENEW_TTL_MS (10,000) change the sizes.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/internal/proccpu"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// renewLoad holds the locks with hold, lets the watchdogs reach their steady
// state, then measures the leader's log entries and CPU for a window.
func renewLoad(b *testing.B, hold func(ctx context.Context, c *Client, names []string) (lost func() int, release func())) {
	n := testenv.EnvInt(b, "RAFTLOCK_RENEW_LOCKS", 10_000)
	ttl := time.Duration(testenv.EnvInt(b, "RAFTLOCK_RENEW_TTL_MS", 10_000)) * time.Millisecond
	pc := testenv.StartProcs(b, procs.Options{StopTimeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	leader, err := pc.WaitLeader(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var eps []string
	for _, nd := range pc.Nodes {
		eps = append(eps, nd.URL())
	}
	logs := &logCounter{}
	c, err := New(eps, WithRequestTimeout(5*time.Second), WithLogger(hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("load/%05d", i)
	}
	start := time.Now()
	lost, release := hold(ctx, c, names)
	b.Logf("%d locks held in %s", n, time.Since(start).Round(time.Millisecond))
	// Renewals start TTL/3 after each grant: past one TTL they are steady.
	time.Sleep(ttl)
	const window = 30 * time.Second
	info0, err := pc.Info(ctx, leader)
	if err != nil {
		b.Fatal(err)
	}
	cpu0, err := proccpu.Used(leader.Pid())
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(window)
	info1, err := pc.Info(ctx, leader)
	if err != nil {
		b.Fatal(err)
	}
	el := time.Since(t0)
	cpu1, err := proccpu.Used(leader.Pid())
	if err != nil {
		b.Fatal(err)
	}
	cpu := (cpu1 - cpu0).Seconds() / el.Seconds()
	entries := float64(info1.CommitIndex-info0.CommitIndex) / el.Seconds()
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("%d locks, TTL %s, over %s: %.1f log entries/s, leader CPU %.1f%% of one core, %d locks lost; loadavg %s",
		n, ttl, window, entries, 100*cpu, lost(), strings.TrimSpace(string(load)))
	b.Logf("client retries and losses: %s", logs)
	b.ReportMetric(entries, "entries/s")
	b.ReportMetric(100*cpu, "leader-cpu-%")
	b.ReportMetric(float64(lost()), "lost")
	release()
}

// logCounter counts the client's log lines by kind, to tell why leases
// were lost (the cluster shed renewals, answered slowly, or lost its leader).
type logCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (l *logCounter) Write(p []byte) (int, error) {
	line := string(p)
	kind := "other"
	for _, k := range []string{"status=429", "status=503", "status=504", "request failed", "renew failed", "lease lost", "session lost"} {
		if strings.Contains(line, k) {
			kind = k
			break
		}
	}
	l.mu.Lock()
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	l.counts[kind]++
	l.mu.Unlock()
	return len(p), nil
}

func (l *logCounter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.counts)
}

// acquireAll runs acquire for every name, 64 at a time.
func acquireAll(b *testing.B, names []string, acquire func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(names); i = int(next.Add(1) - 1) {
				if err := acquire(i); err != nil {
					if failed.Add(1) == 1 {
						b.Logf("acquire %s: %v", names[i], err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d acquires failed", f)
	}
}

// BenchmarkRenewLoad/leases: every lock is a lease with its own watchdog.
// BenchmarkRenewLoad/sessions: the locks are spread over a few sessions,
// and only the sessions are renewed.
func BenchmarkRenewLoad(b *testing.B) {
	ttl := time.Duration(testenv.EnvInt(b, "RAFTLOCK_RENEW_TTL_MS", 10_000)) * time.Millisecond
	b.Run("leases", func(b *testing.B) {
		renewLoad(b, func(ctx context.Context, c *Client, names []string) (func() int, func()) {
			leases := make([]*Lease, len(names))
			acquireAll(b, names, func(i int) (err error) {
				leases[i], err = c.TryAcquire(ctx, names[i], AcquireOptions{TTL: ttl, Owner: "load"})
				return err
			})
			lost := func() int {
				k := 0
				for _, l := range leases {
					if isClosed(l.Lost()) {
						k++
					}
				}
				return k
			}
			return lost, func() {
				for _, l := range leases {
					l.Detach()
				}
			}
		})
	})
	b.Run("sessions", func(b *testing.B) {
		k := testenv.EnvInt(b, "RAFTLOCK_RENEW_SESSIONS", 10)
		renewLoad(b, func(ctx context.Context, c *Client, names []string) (func() int, func()) {
			sessions := make([]*Session, k)
			for i := range sessions {
				var err error
				if sessions[i], err = NewSession(ctx, c, SessionOptions{TTL: ttl, Owner: fmt.Sprintf("load-%d", i)}); err != nil {
					b.Fatal(err)
				}
			}
			leases := make([]*Lease, len(names))
			acquireAll(b, names, func(i int) (err error) {
				leases[i], err = sessions[i%k].TryAcquire(ctx, names[i], AcquireOptions{})
				return err
			})
			lost := func() int {
				n := 0
				for _, l := range leases {
					if isClosed(l.Lost()) {
						n++
					}
				}
				return n
			}
			return lost, func() {
				for _, s := range sessions {
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					s.Close(cctx)
					cancel()
				}
			}
		})
	})
}
