package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/internal/proccpu"
)

const benchHelp = `Usage: raftlock bench [flags]

Load-tests a cluster: --workers goroutines each run acquire (and, with
--renew, one renew) then release, as fast as the cluster answers, for
--duration. A progress line on stderr shows cycles/s and errors; at the end
it prints cycles/s, p50/p95/p99/max latency of each call and errors by kind.

--locks is how many distinct lock names the workers use: 0 (or --workers)
gives each worker its own lock (uncontended); fewer makes workers share
locks (contended: an acquire of a held lock counts as "held" and retries);
more gives each worker several locks in turn.

It also watches for safety slips it can see: two workers told they hold
the same lock at once, a fencing token that did not go up from one grant of
a lock to the next, a renew that changed the token, or a lease refused as
not held before its TTL ran out. Any slip exits 1.

Requests go over keep-alive HTTP straight to the leader (--via http), one
connection per worker and one request per call, or through one Go client
shared by the workers, TryAcquire/Renew/Release (--via client), which sends
calls made at once in batches (--coalesce=false: each call alone).

--server-pids NAME=PID,... (or PID,...) names the server processes: bench
reads their CPU (utime+stime in /proc/PID/stat) before and after the run
and prints it per cycle, in all and per process; when the names are the
nodes' ids it divides the leader's CPU by the requests sent and a
follower's by the entries committed (the commit index's rise). bench's own
CPU is never in it. It also reads from the leader's /metrics how many Raft
rounds (log writes, each one fdatasync on the leader and one AppendEntries
to each follower) carried those entries: a round costs far more CPU than
an entry, so entries per round most decides the CPU per cycle.

Acquires shed with 429 overloaded are counted on a line of their own, with
the latency of those answers (row "shed"). The leader's admission control
counts writes per tenant, the lock name's first segment without tokens, so
two runs with different --prefix are two tenants: run them at once to see
a flood and a calm tenant side by side.

Examples:
  raftlock bench --workers 16 --duration 30s
  raftlock bench --prefix flood/ --workers 300 --duration 15s & raftlock bench --prefix calm/ --workers 4 --duration 15s
  raftlock bench --workers 64 --locks 8 --renew --json --endpoints http://127.0.0.1:8001,http://127.0.0.1:8002
`

type benchConfig struct {
	workers  int
	duration time.Duration
	ttl      time.Duration
	locks    int
	renew    bool
	via      string
	coalesce bool // with --via client
	prefix   string
	progress time.Duration
	// shedPause is how long a worker pauses after a 429 (0: it retries at
	// once, a client that ignores Retry-After).
	shedPause time.Duration
	// servers are the processes whose CPU bench reports (none: no CPU report).
	servers []serverProc
}

func benchCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("bench", benchHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 5*time.Second, true)
	var cfg benchConfig
	c.fs.IntVar(&cfg.workers, "workers", 16, "concurrent workers, each running acquire/release cycles")
	c.fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to run")
	c.fs.DurationVar(&cfg.ttl, "ttl", 10*time.Second, "lease TTL of each acquire, 500ms to 1h")
	c.fs.IntVar(&cfg.locks, "locks", 0, "distinct lock names (0 or --workers: one per worker, uncontended; fewer: contended)")
	c.fs.BoolVar(&cfg.renew, "renew", false, "renew each lease once between acquire and release")
	c.fs.StringVar(&cfg.via, "via", "http", "http: keep-alive HTTP to the leader; client: the Go client library")
	c.fs.BoolVar(&cfg.coalesce, "coalesce", true, "with --via client: the client's coalescing of calls made at once into batches")
	c.fs.StringVar(&cfg.prefix, "prefix", "", "lock name prefix (default: bench/<random>/, fresh each run)")
	c.fs.DurationVar(&cfg.progress, "progress", time.Second, "progress line interval on stderr (0: none)")
	c.fs.DurationVar(&cfg.shedPause, "shed-pause", 0, "pause after a 429 overloaded before the next acquire (0: at once, ignoring Retry-After)")
	cpuProfile := c.fs.String("cpuprofile", "", "write bench's own CPU profile (load generator and client library) to this file")
	serverPids := c.fs.String("server-pids", "", "server processes to report the CPU of: NAME=PID,... (NAME a node id to tell leader from followers) or PID,...")
	if _, code, ok := c.parse(args, environ, 0, 0); !ok {
		return code
	}
	var err error
	if cfg.servers, err = parseServerPids(*serverPids); err != nil {
		return c.usageError(err)
	}
	for _, p := range cfg.servers {
		if _, err := proccpu.Used(p.pid); err != nil {
			return c.usageError(fmt.Errorf("--server-pids: %w", err))
		}
	}
	switch {
	case cfg.workers < 1:
		return c.usageError(errors.New("--workers must be at least 1"))
	case cfg.duration <= 0:
		return c.usageError(errors.New("--duration must be positive"))
	case checkTTL("ttl", cfg.ttl, false) != nil:
		return c.usageError(checkTTL("ttl", cfg.ttl, false))
	case cfg.locks < 0:
		return c.usageError(errors.New("--locks must not be negative"))
	case cfg.via != "http" && cfg.via != "client":
		return c.usageError(errors.New("--via must be http or client"))
	case c.conn.timeout <= 0:
		return c.usageError(errors.New("--timeout must be positive"))
	case len(c.conn.endpointList()) == 0:
		return c.usageError(errors.New("--endpoints: none given"))
	}
	if cfg.locks == 0 {
		cfg.locks = cfg.workers
	}
	if cfg.prefix == "" {
		var r [4]byte
		_, _ = rand.Read(r[:])
		cfg.prefix = "bench/" + hex.EncodeToString(r[:]) + "/"
	}

	eps := make([]string, 0, len(c.conn.endpointList()))
	for _, ep := range c.conn.endpointList() {
		if !strings.Contains(ep, "://") {
			ep = "http://" + ep
		}
		eps = append(eps, strings.TrimSuffix(ep, "/"))
	}
	var target benchTarget
	if cfg.via == "client" {
		target, err = newClientTarget(eps, cfg.workers, c.conn.timeout, cfg.coalesce)
		if err != nil {
			return c.usageError(err)
		}
	} else {
		ctx, cancel := c.conn.ctx()
		target, err = newHTTPTarget(ctx, eps, cfg.workers)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "raftlock bench: %v\n", err)
			return exitUnavailable
		}
	}
	defer target.close()

	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return c.usageError(fmt.Errorf("--cpuprofile: %w", err))
		}
		defer stop()
	}
	b := newBench(cfg, target, c.conn.timeout)
	if len(cfg.servers) > 0 {
		b.meter = &cpuMeter{procs: cfg.servers, endpoints: eps, hc: &http.Client{Timeout: c.conn.timeout}}
	}
	rep := b.run(context.Background(), stderr)
	if c.conn.json {
		c.printJSON(rep)
	} else {
		rep.print(stdout, target.describe())
	}
	if rep.SlipTotal > 0 {
		fmt.Fprintf(stderr, "raftlock bench: %d safety slips seen\n", rep.SlipTotal)
		return exitError
	}
	return exitOK
}

// Slip kinds: what a client can see go wrong with mutual exclusion.
const (
	slipDoubleHolder = "double_holder" // granted while another worker's lease was still valid
	slipTokenDown    = "token_down"    // a grant's token not above the lock's previous grant
	slipRenewToken   = "renew_token"   // a renew answered with another token than the grant
	slipLostEarly    = "lost_early"    // not_holder for a request sent before the lease's deadline
)

// benchDrift is the clock rate drift allowed for when judging whether a
// worker's lease is still valid (the client library's default).
const benchDrift = 0.01

// lockState is what bench knows of one lock: who was told it holds it, until
// when, and the last token granted.
type lockState struct {
	mu        sync.Mutex
	holder    int // worker, -1: none
	deadline  time.Time
	lastToken uint64
}

type bench struct {
	cfg     benchConfig
	target  benchTarget
	timeout time.Duration
	locks   []lockState
	runID   string

	meter *cpuMeter // nil: no CPU report

	cycles   atomic.Int64
	requests atomic.Int64
	errs     atomic.Int64

	mu      sync.Mutex
	errKind map[string]int64
	slips   map[string]int64
}

func newBench(cfg benchConfig, target benchTarget, timeout time.Duration) *bench {
	var r [3]byte
	_, _ = rand.Read(r[:])
	b := &bench{
		cfg: cfg, target: target, timeout: timeout,
		locks:   make([]lockState, cfg.locks),
		runID:   hex.EncodeToString(r[:]),
		errKind: map[string]int64{},
		slips:   map[string]int64{},
	}
	for i := range b.locks {
		b.locks[i].holder = -1
	}
	return b
}

// workerSamples are one worker's latencies, merged at the end so that
// workers share no lock on the hot path.
// shed are the answers of acquires refused with 429 overloaded: how fast a
// node says no matters as much as how fast it says yes.
type workerSamples struct{ acquire, renew, release, shed []time.Duration }

func (b *bench) run(ctx context.Context, stderr io.Writer) *benchReport {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.duration)
	defer cancel()
	samples := make([]workerSamples, b.cfg.workers)
	var cpuBefore cpuSample
	var cpuErr error
	if b.meter != nil {
		cpuBefore, cpuErr = b.meter.sample(ctx)
	}
	start := time.Now()
	stopProgress := b.startProgress(stderr, start)
	var wg sync.WaitGroup
	for w := range b.cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.worker(ctx, w, &samples[w])
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var cpuAfter cpuSample
	if b.meter != nil && cpuErr == nil {
		cpuAfter, cpuErr = b.meter.sample(context.WithoutCancel(ctx))
	}
	stopProgress()
	rep := b.report(samples, elapsed)
	switch {
	case b.meter == nil:
	case cpuErr != nil:
		fmt.Fprintf(stderr, "raftlock bench: no cpu report: %v\n", cpuErr)
	default:
		rep.CPU = b.meter.report(cpuBefore, cpuAfter, rep.Cycles, b.requests.Load())
	}
	return rep
}

// startProgress prints cycles/s and errors every cfg.progress on one line
// (rewritten in place on a terminal) until the returned func is called.
func (b *bench) startProgress(stderr io.Writer, start time.Time) func() {
	if b.cfg.progress <= 0 {
		return func() {}
	}
	tty := false
	if f, ok := stderr.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(b.cfg.progress)
		defer t.Stop()
		last, lastAt := int64(0), start
		for {
			select {
			case <-done:
				if tty {
					fmt.Fprintln(stderr)
				}
				return
			case now := <-t.C:
				n := b.cycles.Load()
				rate := float64(n-last) / now.Sub(lastAt).Seconds()
				last, lastAt = n, now
				line := fmt.Sprintf("bench %5.1fs/%s  %8.0f cycles/s  %d cycles  %d errors  %d slips",
					now.Sub(start).Seconds(), b.cfg.duration, rate, n, b.errs.Load(), b.slipCount())
				if tty {
					fmt.Fprintf(stderr, "\r\033[K%s", line)
				} else {
					fmt.Fprintln(stderr, line)
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// lockFor is the lock of worker w's n-th cycle.
func (b *bench) lockFor(w int, n int) int {
	if b.cfg.locks <= b.cfg.workers {
		return w % b.cfg.locks
	}
	per := (b.cfg.locks - w + b.cfg.workers - 1) / b.cfg.workers // locks w, w+workers, ...
	return w + (n%per)*b.cfg.workers
}

func (b *bench) worker(ctx context.Context, w int, s *workerSamples) {
	owner := fmt.Sprintf("bench-w%d", w)
	for n := 0; ctx.Err() == nil; n++ {
		li := b.lockFor(w, n)
		name := fmt.Sprintf("%s%d", b.cfg.prefix, li)
		id := fmt.Sprintf("bench-%s-%d-%d", b.runID, w, n)
		st := &b.locks[li]

		sent := time.Now()
		token, err := b.call(ctx, func(ctx context.Context) (uint64, error) {
			return b.target.acquire(ctx, name, owner, id, b.cfg.ttl)
		})
		got := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return // the run ended mid-call: not the cluster's fault
			}
			b.fail(err)
			if errKind(err) == kindOverloaded {
				s.shed = append(s.shed, got.Sub(sent))
				sleepCtx(ctx, b.cfg.shedPause)
			}
			if errKind(err) == kindHeld {
				sleepCtx(ctx, time.Millisecond) // let the holder finish
			}
			continue
		}
		s.acquire = append(s.acquire, got.Sub(sent))
		deadline := sent.Add(time.Duration(float64(b.cfg.ttl) * (1 - benchDrift)))
		b.granted(st, w, token, deadline, got)

		if b.cfg.renew {
			rsent := time.Now()
			rtoken, err := b.call(ctx, func(ctx context.Context) (uint64, error) {
				return b.target.renew(ctx, name, id, b.cfg.ttl)
			})
			rgot := time.Now()
			switch {
			case err == nil:
				s.renew = append(s.renew, rgot.Sub(rsent))
				if rtoken != token {
					b.slip(slipRenewToken)
				}
				st.mu.Lock()
				if st.holder == w {
					st.deadline = rsent.Add(time.Duration(float64(b.cfg.ttl) * (1 - benchDrift)))
					deadline = st.deadline
				}
				st.mu.Unlock()
			case ctx.Err() != nil && errKind(err) != kindNotHolder:
			default:
				b.failHolding(err, rsent, deadline)
			}
		}

		// From here on this worker no longer counts as holding the lock:
		// the release may be applied before its answer comes back.
		st.mu.Lock()
		if st.holder == w {
			st.holder = -1
		}
		st.mu.Unlock()
		rsent := time.Now()
		_, err = b.call(context.WithoutCancel(ctx), func(ctx context.Context) (uint64, error) {
			return 0, b.target.release(ctx, name, id)
		})
		if err != nil {
			b.failHolding(err, rsent, deadline)
			continue
		}
		s.release = append(s.release, time.Since(rsent))
		b.cycles.Add(1)
	}
}

// call runs one request bounded by the per-request timeout.
func (b *bench) call(ctx context.Context, f func(context.Context) (uint64, error)) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	b.requests.Add(1)
	return f(ctx)
}

// granted records that worker w was told it holds lock st with token, valid
// until deadline, and checks that against what the other workers were told.
func (b *bench) granted(st *lockState, w int, token uint64, deadline, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.holder >= 0 && st.holder != w && now.Before(st.deadline) {
		b.slip(slipDoubleHolder)
	}
	if token <= st.lastToken {
		b.slip(slipTokenDown)
	}
	st.holder, st.deadline, st.lastToken = w, deadline, max(token, st.lastToken)
}

// failHolding counts a failed renew or release; not_holder for a request
// sent while the lease should still have held is a slip too.
func (b *bench) failHolding(err error, sent, deadline time.Time) {
	b.fail(err)
	if errKind(err) == kindNotHolder && sent.Before(deadline) {
		b.slip(slipLostEarly)
	}
}

func (b *bench) fail(err error) {
	kind := errKind(err)
	if kind != kindHeld {
		b.errs.Add(1)
	}
	b.mu.Lock()
	b.errKind[kind]++
	b.mu.Unlock()
}

func (b *bench) slip(kind string) {
	b.mu.Lock()
	b.slips[kind]++
	b.mu.Unlock()
}

func (b *bench) slipCount() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for _, v := range b.slips {
		n += v
	}
	return n
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// benchReport is bench's result; --json prints it as is.
type benchReport struct {
	Workers      int                `json:"workers"`
	Locks        int                `json:"locks"`
	Contended    bool               `json:"contended"`
	TTLMs        int64              `json:"ttl_ms"`
	Renew        bool               `json:"renew"`
	Via          string             `json:"via"`
	DurationMs   int64              `json:"duration_ms"`
	Cycles       int64              `json:"cycles"`
	CyclesPerSec float64            `json:"cycles_per_sec"`
	Ops          map[string]opStats `json:"ops"`
	Errors       map[string]int64   `json:"errors"`
	Slips        map[string]int64   `json:"slips"`
	SlipTotal    int64              `json:"slip_total"`
	CPU          *cpuReport         `json:"cpu,omitempty"`
}

// opStats are one call's successful answers and their latency percentiles,
// taken from every sample (sorted), in milliseconds. "shed" is the acquires
// answered 429 overloaded.
type opStats struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func newOpStats(d []time.Duration) opStats {
	if len(d) == 0 {
		return opStats{}
	}
	slices.Sort(d)
	// Nearest rank: the smallest sample with at least p of all at or below it.
	pct := func(p float64) float64 {
		i := int(p*float64(len(d))+0.999999) - 1
		return msf(d[min(max(i, 0), len(d)-1)])
	}
	return opStats{Count: int64(len(d)), P50: pct(0.50), P95: pct(0.95), P99: pct(0.99), Max: msf(d[len(d)-1])}
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (b *bench) report(samples []workerSamples, elapsed time.Duration) *benchReport {
	var acq, ren, rel, shed []time.Duration
	for _, s := range samples {
		acq, ren, rel = append(acq, s.acquire...), append(ren, s.renew...), append(rel, s.release...)
		shed = append(shed, s.shed...)
	}
	r := &benchReport{
		Workers: b.cfg.workers, Locks: b.cfg.locks, Contended: b.cfg.locks < b.cfg.workers,
		TTLMs: b.cfg.ttl.Milliseconds(), Renew: b.cfg.renew, Via: b.cfg.via,
		DurationMs: elapsed.Milliseconds(), Cycles: b.cycles.Load(),
		Ops:    map[string]opStats{"acquire": newOpStats(acq), "release": newOpStats(rel)},
		Errors: map[string]int64{}, Slips: map[string]int64{},
	}
	if b.cfg.renew {
		r.Ops["renew"] = newOpStats(ren)
	}
	if len(shed) > 0 {
		r.Ops["shed"] = newOpStats(shed)
	}
	r.CyclesPerSec = float64(r.Cycles) / elapsed.Seconds()
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, v := range b.errKind {
		r.Errors[k] = v
	}
	for _, k := range []string{slipDoubleHolder, slipTokenDown, slipRenewToken, slipLostEarly} {
		r.Slips[k] = b.slips[k]
		r.SlipTotal += b.slips[k]
	}
	return r
}

func (r *benchReport) print(w io.Writer, via string) {
	mode := "uncontended"
	if r.Contended {
		mode = "contended"
	}
	fmt.Fprintf(w, "%d workers, %d locks (%s), ttl %s, %s, via %s\n",
		r.Workers, r.Locks, mode, time.Duration(r.TTLMs)*time.Millisecond, (time.Duration(r.DurationMs) * time.Millisecond).Round(time.Millisecond), via)
	fmt.Fprintf(w, "cycles: %d, %.1f cycles/s\n\n", r.Cycles, r.CyclesPerSec)
	fmt.Fprintf(w, "%-8s %9s %9s %9s %9s %9s %9s\n", "call", "ok", "ok/s", "p50 ms", "p95 ms", "p99 ms", "max ms")
	for _, op := range []string{"acquire", "renew", "release", "shed"} {
		s, ok := r.Ops[op]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "%-8s %9d %9.1f %9.2f %9.2f %9.2f %9.2f\n",
			op, s.Count, float64(s.Count)/(float64(r.DurationMs)/1000), s.P50, s.P95, s.P99, s.Max)
	}
	// 429s on a line of their own: under admission control they are the
	// expected answer to overload, not a failure like the others.
	others := maps.Clone(r.Errors)
	delete(others, kindOverloaded)
	fmt.Fprintf(w, "\nerrors: %s\n", countsLine(others))
	fmt.Fprintf(w, "overloaded (429, shed): %d\n", r.Errors[kindOverloaded])
	fmt.Fprintf(w, "safety slips: %s\n", countsLine(r.Slips))
	if r.CPU != nil {
		r.CPU.print(w)
	}
}

// countsLine prints "none" or "kind n, kind n" sorted by kind, leaving out
// zero counts.
func countsLine(m map[string]int64) string {
	var keys []string
	for k, v := range m {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "none"
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// startCPUProfile profiles this process into path until stop: the load
// generator's and the client library's own CPU, which bench's CPU report
// leaves out.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
