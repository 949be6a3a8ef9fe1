package main

// Scale measurements on real `raftlock serve` processes on loopback. They
// take minutes and are benchmarks only so that `go test` never runs them by
// accident; each runs once:
//
//	go test -run=NONE -bench=Scale -benchtime=1x -timeout=60m -v ./cmd/raftlock/
//
// The nodes run testenv.Binary: ./cmd/raftlock built once, or the binary
// RAFTLOCK_BIN names.
// RAFTLOCK_SCALE_LOCKS, _EXPIRIES, _HOLDERS and _RENEW_TTL_MS change the sizes
// (defaults 1,000,000, 100,000, 10,000 and 10s); RAFTLOCK_SCALE_KEEP=DIR
// keeps the nodes' data dirs and logs there; RAFTLOCK_SCALE_FLAGS adds serve
// flags (e.g. "--log-store boltdb") and RAFTLOCK_SCALE_ENV environment to the
// nodes (e.g. "GOMEMLIMIT=640MiB"); RAFTLOCK_SCALE_PROFILE=DIR writes the
// leader's CPU profile around the expiry (BenchmarkScaleExpiry) and its heap
// profiles (BenchmarkScaleHeldLocks) there.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// procCluster is three `raftlock serve` processes (procs.Cluster) that a
// benchmark stops and restarts.
type procCluster struct {
	*procs.Cluster
	b     *testing.B
	nodes []*procs.Node
}

func startProcCluster(b *testing.B, extra ...string) *procCluster {
	root := b.TempDir()
	if keep := os.Getenv("RAFTLOCK_SCALE_KEEP"); keep != "" {
		root = filepath.Join(keep, b.Name())
		if err := os.MkdirAll(root, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	extra = append(extra, strings.Fields(os.Getenv("RAFTLOCK_SCALE_FLAGS"))...)
	// A node with a million locks may take a while to stop cleanly.
	pc := testenv.StartProcs(b, procs.Options{Dir: root, Extra: extra, StopTimeout: 30 * time.Second,
		Env: strings.Fields(os.Getenv("RAFTLOCK_SCALE_ENV")), Debug: os.Getenv("RAFTLOCK_SCALE_PROFILE") != ""})
	return &procCluster{Cluster: pc, b: b, nodes: pc.Nodes}
}

func (c *procCluster) start(n *procs.Node) {
	if err := n.Start(); err != nil {
		c.b.Fatal(err)
	}
}

// stop sends SIGTERM and waits for the process to exit.
func (c *procCluster) stop(n *procs.Node) { n.Terminate() }

// leader waits until the running nodes agree on a leader and returns it.
func (c *procCluster) leader(timeout time.Duration) *procs.Node {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l, err := c.WaitLeader(ctx)
	if err != nil {
		c.b.Fatal(err)
	}
	return l
}

// waitCaughtUp waits until every node has applied what the leader had
// committed when it was called, and returns that index.
func (c *procCluster) waitCaughtUp(timeout time.Duration) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	li, err := c.Info(ctx, c.leader(timeout))
	if err != nil {
		c.b.Fatal(err)
	}
	testenv.WaitFor(c.b, timeout, fmt.Sprintf("every node to apply index %d", li.CommitIndex), func() bool {
		for _, n := range c.nodes {
			if i, err := c.Info(ctx, n); err != nil || i.AppliedIndex < li.CommitIndex {
				return false
			}
		}
		return true
	})
	return li.CommitIndex
}

func (c *procCluster) target(workers int) *httpTarget {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := newHTTPTarget(ctx, []string{c.nodes[0].URL(), c.nodes[1].URL(), c.nodes[2].URL()}, workers)
	if err != nil {
		c.b.Fatal(err)
	}
	return t
}

// waitReady polls /readyz until 200 and returns how long that took.
func waitReady(b *testing.B, n *procs.Node, since time.Time, timeout time.Duration) time.Duration {
	for time.Since(since) < timeout {
		resp, err := http.Get(n.URL() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(since)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("%s not ready after %s", n.ID, timeout)
	return 0
}

// saveProfile fetches /debug/pprof/NAME?QUERY from a node started with
// RAFTLOCK_SCALE_PROFILE set and writes it to that directory as FILE.
func saveProfile(b *testing.B, n *procs.Node, name, query, file string) {
	dir := os.Getenv("RAFTLOCK_SCALE_PROFILE")
	if dir == "" || n.DebugAddr == "" {
		return
	}
	resp, err := http.Get("http://" + n.DebugAddr + "/debug/pprof/" + name + "?" + query)
	if err != nil {
		b.Logf("%s profile: %v", name, err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, file), data, 0o644)
	}
	if err != nil {
		b.Logf("%s profile: %v", name, err)
		return
	}
	b.Logf("%s: %s profile in %s", n.ID, name, filepath.Join(dir, file))
}

// rssMiB is a process's resident set size.
func rssMiB(n *procs.Node) float64 { return procStatusMiB(n, "VmRSS") }

// rssParts says what a process's RSS is made of: anonymous memory (the Go
// heap, stacks, runtime) and file pages (the mmapped raft.db that bbolt
// reads through, which the kernel can drop under pressure).
func rssParts(n *procs.Node) string {
	return fmt.Sprintf("RSS %.0f MiB (anonymous %.0f, file %.0f)", rssMiB(n), procStatusMiB(n, "RssAnon"), procStatusMiB(n, "RssFile"))
}

// procStatusMiB reads one kB field of /proc/PID/status.
func procStatusMiB(n *procs.Node, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.Pid()))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return -1
}

// cpuSeconds is a process's user+system CPU time so far.
func cpuSeconds(n *procs.Node) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.Pid()))
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// metric reads one unlabelled sample from a node's /metrics.
func metric(n *procs.Node, name string) (float64, error) {
	resp, err := http.Get(n.URL() + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", n.ID, name)
}

// snapshotTimes returns the durations of the snapshots a node's log records
// (from "starting snapshot up to" to "snapshot complete up to").
func snapshotTimes(n *procs.Node) []time.Duration {
	b, _ := os.ReadFile(n.LogPath)
	var out []time.Duration
	var start time.Time
	for _, line := range strings.Split(string(b), "\n") {
		ts, _, _ := strings.Cut(line, " ")
		t, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts)
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(line, "starting snapshot up to"):
			start = t
		case strings.Contains(line, "snapshot complete up to") && !start.IsZero():
			out = append(out, t.Sub(start))
			start = time.Time{}
		}
	}
	return out
}

// newestSnapshot is the index and size of the newest complete snapshot in a
// data dir (the snapshot store names them term-index-millis; in-progress
// ones end in .tmp).
func newestSnapshot(n *procs.Node) (index uint64, size int64) {
	files, _ := filepath.Glob(filepath.Join(n.DataDir, "snapshots", "*", "state.bin"))
	for _, f := range files {
		dir := filepath.Base(filepath.Dir(f))
		parts := strings.Split(dir, "-")
		if strings.HasSuffix(dir, ".tmp") || len(parts) != 3 {
			continue
		}
		i, err := strconv.ParseUint(parts[1], 10, 64)
		if err != nil || i < index {
			continue
		}
		if fi, err := os.Stat(f); err == nil {
			index, size = i, fi.Size()
		}
	}
	return index, size
}

// load acquires locks prefix0..prefix(n-1) with workers in parallel; ttl(i)
// gives each lease's TTL at the moment it is sent.
func load(b *testing.B, t *httpTarget, prefix string, n, workers int, ttl func() time.Duration) (time.Duration, int64) {
	var next, failed atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := t.acquire(ctx, prefix+strconv.FormatInt(i, 10), "scale", scaleLeaseID(prefix, i), ttl())
				cancel()
				if err != nil {
					if failed.Add(1) <= 3 {
						b.Logf("worker %d: acquire %d: %v", w, i, err)
					}

				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > int64(n/100) {
		b.Fatalf("%d of %d acquires failed", failed.Load(), n)
	}
	return time.Since(start), failed.Load()
}

// scaleLeaseID is the lease id of lock prefix+i, so that a renewer can
// find it again.
func scaleLeaseID(prefix string, i int64) string {
	return "scale-lease-" + strings.TrimSuffix(prefix, "/") + "-" + strconv.FormatInt(i, 10)
}

// BenchmarkScaleHeldLocks holds 1M locks on three nodes and reports RSS per
// node, snapshot size and time, and how long a node takes to restart from
// its data dir (log replay, then from a snapshot).
func BenchmarkScaleHeldLocks(b *testing.B) {
	n := testenv.EnvInt(b, "RAFTLOCK_SCALE_LOCKS", 1_000_000)
	// No snapshot while loading: the log grows to n entries, so the first
	// restart replays it all; then a lower threshold makes one snapshot.
	c := startProcCluster(b, "--snapshot-threshold", strconv.Itoa(4*n), "--trailing-logs", "10240", "--snapshot-interval", "2s")
	t := c.target(64)
	took, failed := load(b, t, "held/", n, 64, func() time.Duration { return time.Hour })
	b.Logf("loaded %d locks in %s (%.0f acquires/s), %d failed", n, took.Round(time.Millisecond), float64(n)/took.Seconds(), failed)
	b.ReportMetric(float64(n)/took.Seconds(), "load-acquires/s")
	loaded := c.waitCaughtUp(time.Minute)
	for _, nd := range c.nodes {
		held, _ := metric(nd, "raftlock_leases_held")
		heap, _ := metric(nd, "go_memstats_heap_inuse_bytes")
		b.Logf("%s: %s, Go heap in use %.0f MiB, leases held %.0f", nd.ID, rssParts(nd), heap/(1<<20), held)
		b.ReportMetric(rssMiB(nd), nd.ID+"-rss-MiB")
	}
	saveProfile(b, c.leader(10*time.Second), "heap", "gc=1", "held-leader.heap.pprof")

	// Restart a follower: it replays the whole log (no snapshot yet).
	ld := c.leader(10 * time.Second)
	f := c.nodes[0]
	if f == ld {
		f = c.nodes[1]
	}
	c.stop(f)
	start := time.Now()
	c.start(f)
	replay := waitReady(b, f, start, 10*time.Minute)
	b.Logf("%s restart with %d log entries, no snapshot: ready after %s, %s", f.ID, n, replay.Round(time.Millisecond), rssParts(f))
	b.ReportMetric(replay.Seconds(), "restart-replay-s")
	saveProfile(b, f, "heap", "gc=1", "held-replayed.heap.pprof")

	// Snapshot on every node: restart each with a low threshold. A node
	// snapshots what it has applied, which right after a restart is a part
	// of the log: wait for a snapshot that covers every loaded lock.
	for _, nd := range c.nodes {
		c.stop(nd)
		for i, a := range nd.Args {
			if a == "--snapshot-threshold" {
				nd.Args[i+1] = "1024"
			}
		}
		c.start(nd)
	}
	c.leader(time.Minute)
	deadline := time.Now().Add(5 * time.Minute)
	for _, nd := range c.nodes {
		for time.Now().Before(deadline) {
			if i, _ := newestSnapshot(nd); i >= loaded && len(snapshotTimes(nd)) > 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		snaps := snapshotTimes(nd)
		index, size := newestSnapshot(nd)
		if index < loaded || len(snaps) == 0 {
			b.Fatalf("%s: newest snapshot at index %d, below the loaded %d", nd.ID, index, loaded)
		}
		last := snaps[len(snaps)-1]
		b.Logf("%s: snapshot of %d locks at index %d: %d taken, the last %s (sort+write+compact), %.1f MiB on disk; %s", nd.ID, n, index, len(snaps), last.Round(time.Millisecond), float64(size)/(1<<20), rssParts(nd))
		if nd == c.nodes[0] {
			b.ReportMetric(last.Seconds(), "snapshot-s")
			b.ReportMetric(float64(size)/(1<<20), "snapshot-MiB")
		}
	}
	ld = c.leader(10 * time.Second)
	f = c.nodes[0]
	if f == ld {
		f = c.nodes[1]
	}
	c.stop(f)
	start = time.Now()
	c.start(f)
	fromSnap := waitReady(b, f, start, 10*time.Minute)
	b.Logf("%s restart from snapshot: ready after %s, %s", f.ID, fromSnap.Round(time.Millisecond), rssParts(f))
	b.ReportMetric(fromSnap.Seconds(), "restart-snapshot-s")
	saveProfile(b, f, "heap", "gc=1", "held-restored.heap.pprof")
	for _, nd := range c.nodes {
		heap, _ := metric(nd, "go_memstats_heap_inuse_bytes")
		b.Logf("%s: %s after restarts, Go heap in use %.0f MiB", nd.ID, rssParts(nd), heap/(1<<20))
		b.ReportMetric(rssMiB(nd), nd.ID+"-rss-after-restarts-MiB")
	}
}

// BenchmarkScaleExpiry makes 100k leases expire at one moment (each acquire
// gets the TTL left until then) while 16 workers run acquire+release
// cycles on other locks, and reports how long the expired locks took to be
// free and the workers' acquire latency meanwhile.
func BenchmarkScaleExpiry(b *testing.B) {
	n := testenv.EnvInt(b, "RAFTLOCK_SCALE_EXPIRIES", 100_000)
	c := startProcCluster(b)
	t := c.target(64)
	// Aim the expiry well past the end of loading, at ~1,000 acquires/s at worst.
	at := time.Now().Add(time.Duration(n)*time.Millisecond + 15*time.Second)
	took, failed := load(b, t, "exp/", n, 64, func() time.Duration {
		return time.Until(at).Round(time.Millisecond)
	})
	b.Logf("loaded %d leases in %s, %d failed; expiring at +%s", n, took.Round(time.Millisecond), failed, time.Until(at).Round(time.Millisecond))
	if time.Until(at) < 5*time.Second {
		b.Fatalf("loading ended %s before the expiry: too slow", time.Until(at))
	}
	ld := c.leader(time.Second)

	// Background load from 5s before the expiry until 5s after it.
	const bgWorkers = 16
	cfg := benchConfig{workers: bgWorkers, locks: bgWorkers, ttl: 10 * time.Second, prefix: "bg/"}
	bn := newBench(cfg, t, 5*time.Second)
	type sample struct {
		at time.Time
		d  time.Duration
	}
	var mu sync.Mutex
	var samples []sample
	sleepCtx(context.Background(), time.Until(at.Add(-5*time.Second)))
	cpu0 := make([]float64, len(c.nodes))
	for i, nd := range c.nodes {
		cpu0[i] = cpuSeconds(nd)
	}
	profiled := make(chan struct{})
	go func() {
		defer close(profiled)
		sleepCtx(context.Background(), time.Until(at.Add(-time.Second)))
		saveProfile(b, ld, "profile", "seconds=3", "expiry-leader.cpu.pprof")
	}()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range bgWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				name, id := fmt.Sprintf("bg/%d", w), fmt.Sprintf("background-lease-%d-%d", w, i)
				s := time.Now()
				_, err := t.acquire(context.Background(), name, "bg", id, cfg.ttl)
				d := time.Since(s)
				if err != nil {
					bn.fail(err)
					sleepCtx(ctx, 10*time.Millisecond)
					continue
				}
				mu.Lock()
				samples = append(samples, sample{s, d})
				mu.Unlock()
				if err := t.release(context.Background(), name, id); err != nil {
					bn.fail(err)
				}
			}
		}()
	}
	// Cleared: the leader holds no more than the background workers can,
	// and a list of the prefix comes back empty.
	var cleared time.Duration
	for {
		held, err := metric(ld, "raftlock_leases_held")
		if err == nil && held <= bgWorkers && time.Now().After(at) {
			var out struct {
				Locks []any `json:"locks"`
			}
			if t.get(context.Background(), ld.URL()+"/v1/locks?prefix=exp/&limit=1", &out) == nil && len(out.Locks) == 0 {
				cleared = time.Since(at)
				break
			}
		}
		if time.Since(at) > time.Minute {
			b.Fatalf("expired leases not cleared a minute after their expiry (held %v)", held)
		}
		time.Sleep(10 * time.Millisecond)
	}
	sleepCtx(context.Background(), time.Until(at.Add(5*time.Second)))
	cancel()
	wg.Wait()
	<-profiled
	for i, nd := range c.nodes {
		b.Logf("%s: %.2f CPU-s in the 10 s around the expiry", nd.ID, cpuSeconds(nd)-cpu0[i])
	}
	var before, during []time.Duration
	for _, s := range samples {
		if s.at.Before(at.Add(-100 * time.Millisecond)) {
			before = append(before, s.d)
		} else if s.at.Before(at.Add(cleared + 500*time.Millisecond)) {
			during = append(during, s.d)
		}
	}
	bs, ds := newOpStats(before), newOpStats(during)
	b.Logf("%d leases expiring together: all free %s after their expiry", n, cleared.Round(time.Millisecond))
	b.Logf("acquire, %d workers, 5s before: n=%d p50 %.2f p99 %.2f max %.2f ms", bgWorkers, bs.Count, bs.P50, bs.P99, bs.Max)
	b.Logf("acquire from expiry to clear+0.5s: n=%d p50 %.2f p99 %.2f max %.2f ms; errors %v", ds.Count, ds.P50, ds.P99, ds.Max, bn.errKind)
	b.ReportMetric(cleared.Seconds(), "clear-s")
	b.ReportMetric(ds.P99, "acquire-p99-during-ms")
	b.ReportMetric(ds.Max, "acquire-max-during-ms")
}

// BenchmarkScaleRenewal keeps 10,000 leases held by renewing each every
// TTL/3 for 30s, and reports renew latency, leases lost and leader CPU.
func BenchmarkScaleRenewal(b *testing.B) {
	n := testenv.EnvInt(b, "RAFTLOCK_SCALE_HOLDERS", 10_000)
	ttl := time.Duration(testenv.EnvInt(b, "RAFTLOCK_SCALE_RENEW_TTL_MS", 10_000)) * time.Millisecond
	c := startProcCluster(b)
	t := c.target(256)
	took, failed := load(b, t, "ren/", n, 64, func() time.Duration { return ttl })
	b.Logf("%d holders acquired in %s, %d failed", n, took.Round(time.Millisecond), failed)
	ld := c.leader(time.Second)
	const runFor = 30 * time.Second
	var mu sync.Mutex
	var lat []time.Duration
	var lost, errs atomic.Int64
	cpu0, t0 := cpuSeconds(ld), time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name, id := "ren/"+strconv.Itoa(i), scaleLeaseID("ren/", int64(i))
			// Spread the holders over the first interval.
			sleepCtx(ctx, time.Duration(int64(ttl/3)*int64(i)/int64(n)))
			tk := time.NewTicker(ttl / 3)
			defer tk.Stop()
			for ctx.Err() == nil {
				s := time.Now()
				rctx, rcancel := context.WithTimeout(context.Background(), ttl/3)
				_, err := t.renew(rctx, name, id, ttl)
				rcancel()
				d := time.Since(s)
				switch {
				case err == nil:
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				case errKind(err) == kindNotHolder:
					lost.Add(1)
					return
				default:
					errs.Add(1)
				}
				select {
				case <-ctx.Done():
				case <-tk.C:
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	cpu := (cpuSeconds(ld) - cpu0) / el.Seconds()
	s := newOpStats(lat)
	b.Logf("%d holders, TTL %s, renew every %s for %s: %.0f renews/s, p50 %.2f p95 %.2f p99 %.2f max %.2f ms; %d leases lost, %d other errors; leader CPU %.0f%% of one core, RSS %.0f MiB",
		n, ttl, ttl/3, runFor, float64(s.Count)/el.Seconds(), s.P50, s.P95, s.P99, s.Max, lost.Load(), errs.Load(), 100*cpu, rssMiB(ld))
	b.ReportMetric(float64(s.Count)/el.Seconds(), "renews/s")
	b.ReportMetric(s.P99, "renew-p99-ms")
	b.ReportMetric(float64(lost.Load()), "lost")
}
