package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/faults"
	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/leaderwatch"
	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
	"github.com/raftlock/raftlock/cmd/raftlock-check/proxy"
	"github.com/raftlock/raftlock/cmd/raftlock-check/register"
	"github.com/raftlock/raftlock/cmd/raftlock-check/workload"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// config is what the run flags say.
type config struct {
	duration    time.Duration
	seed        int64
	bin         string
	clients     int
	locks       int
	out         string
	keep        bool
	drift       float64
	linTimeout  time.Duration
	calmMin     time.Duration
	calmMax     time.Duration
	faults      []string
	seededBug   string
	snapWait    time.Duration
	logStore    string // raftlock serve --log-store ("": its default)
	serverFlags string // more raftlock serve flags, space-separated
	// clockFaults adds the clock faults (faults.ClockKinds) and skews client
	// clocks; it needs a raftlock_faults build of raftlock.
	clockFaults bool
	leaderRate  float64 // seeded twin beyond the bound: every node's clock rate
	// mix is the share of client cycles that use sessions, semaphore
	// permits and shared locks, on names of their own.
	mix float64
	// timeProbes is the share of client cycles that probe the time bounds
	// (l), (m), (n), on ttl/N and sttl/N.
	timeProbes float64
	// batch is the share of the lock cycle's batchable calls sent in a
	// POST /v1/batch (workload/batch.go).
	batch      float64
	probeKinds string // --time-probe-kinds: which time probes (empty: all)
}

// ttlLocks and sessLocks are the names the time probes use, as many as
// --locks: TTL leases (and hand-offs) on ttl/N, session leases on sttl/N.
func (c config) ttlLocks() []string  { return c.names("ttl/%d") }
func (c config) sessLocks() []string { return c.names("sttl/%d") }

func (c config) names(format string) []string {
	if c.timeProbes <= 0 {
		return nil
	}
	var out []string
	for i := 0; i < c.locks; i++ {
		out = append(out, fmt.Sprintf(format, i))
	}
	return out
}

// rwLocks and semaphores are the names the mixed cycles use, as many as
// --locks; semaphore i has limit 2 + i%2.
func (c config) rwLocks() []string {
	var out []string
	for i := 0; i < c.locks; i++ {
		out = append(out, fmt.Sprintf("rw/%d", i))
	}
	return out
}

func (c config) semaphores() map[string]int64 {
	out := map[string]int64{}
	for i := 0; i < c.locks; i++ {
		out[fmt.Sprintf("sem/%d", i)] = int64(2 + i%2)
	}
	return out
}

func parseRun(args []string, stderr io.Writer) (config, error) {
	var c config
	var faultList string
	fs := flag.NewFlagSet("raftlock-check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&c.duration, "duration", 2*time.Minute, "how long the workload and faults run")
	fs.Int64Var(&c.seed, "seed", 0, "random seed (0: from the clock); printed at start so a run can be replayed")
	fs.StringVar(&c.bin, "raftlock-bin", "", "raftlock binary (default: go build ./cmd/raftlock into the run dir)")
	fs.IntVar(&c.clients, "clients", 6, "workload client processes (5-8)")
	fs.IntVar(&c.locks, "locks", 3, "lock names")
	fs.StringVar(&c.out, "out", "", "run directory (default: a new temporary dir)")
	fs.BoolVar(&c.keep, "keep", false, "keep the run directory even when every property holds")
	fs.Float64Var(&c.drift, "drift", 0.02, "clock rate drift a client allows for in (a)")
	fs.DurationVar(&c.linTimeout, "lin-timeout", 3*time.Minute, "porcupine time limit per lock")
	fs.DurationVar(&c.calmMin, "calm-min", 2*time.Second, "shortest calm period between faults")
	fs.DurationVar(&c.calmMax, "calm-max", 5*time.Second, "longest calm period between faults")
	fs.DurationVar(&c.snapWait, "snapshot-wait", 70*time.Second, "keep a killed follower down until the leader snapshots, at most this long (0: 2-5 s)")
	fs.StringVar(&c.logStore, "log-store", "", "the nodes' --log-store (empty: raftlock's default)")
	fs.StringVar(&c.serverFlags, "server-flags", "", "more raftlock serve flags for every node, space-separated (e.g. \"--heartbeat-timeout 500ms\")")
	fs.StringVar(&faultList, "faults", strings.Join(faults.All, ","), "faults to cycle through")
	fs.StringVar(&c.seededBug, "seeded-bug", os.Getenv("RAFTLOCK_SEEDED_BUG"), "seeded bug (test builds only; env RAFTLOCK_SEEDED_BUG)")
	fs.BoolVar(&c.clockFaults, "clock-faults", false, "add clock faults: wall jumps, leader rate skew, monotonic leaps (raftlock built with -tags raftlock_faults)")
	fs.Float64Var(&c.leaderRate, "clock-leader-rate", 0, "with --clock-faults: run every node's clock at this rate (1.2: the seeded twin beyond the bound)")
	fs.Float64Var(&c.timeProbes, "time-probes", 0.08, "share of client cycles that probe the time bounds: abandoned leases and sessions, and hand-offs to parked acquires (on ttl/N and sttl/N; 0: none)")
	fs.StringVar(&c.probeKinds, "time-probe-kinds", "", "comma-separated time probes to run: abandon (TTL leases), session, handoff (empty: all)")
	fs.Float64Var(&c.batch, "batch", 0.25, "share of the lock cycle's acquires (without a wait), renews and releases sent in a batch, with a companion release that changes nothing (0: none)")
	fs.Float64Var(&c.mix, "mix", 0.4, "share of client cycles that use sessions, semaphore permits and shared locks (on rw/N and sem/N; 0: the lock workload alone)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.clockFaults {
		driftSet := false
		fs.Visit(func(f *flag.Flag) { driftSet = driftSet || f.Name == "drift" })
		if !driftSet {
			c.drift = faults.Drift // judge (a) by the client library's own allowance
		}
	}
	if c.seed == 0 {
		c.seed = time.Now().UnixNano() % 1_000_000_000
	}
	if faultList != "" {
		c.faults = strings.Split(faultList, ",")
	}
	if c.clockFaults {
		c.faults = faults.WithClock(c.faults)
	}
	if slices.Contains(c.faults, faults.RestoreCrash) && slices.Contains(c.faults, faults.Restore) {
		// The nodes run with the crash point: every restore would crash.
		return c, fmt.Errorf("--faults: %s and %s cannot run together", faults.Restore, faults.RestoreCrash)
	}
	if c.clients < 1 || c.locks < 1 || c.calmMax < c.calmMin {
		return c, fmt.Errorf("bad --clients, --locks or calm periods")
	}
	return c, nil
}

func runMain(args []string) int {
	cfg, err := parseRun(args, os.Stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(os.Stderr, "raftlock-check:", err)
		return 2
	}
	if cfg.seededBug != "" && !proxy.ServerSide(cfg.seededBug) {
		if _, err := proxy.Lookup(cfg.seededBug); err != nil {
			fmt.Fprintln(os.Stderr, "raftlock-check:", err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r, err := run(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "raftlock-check:", err)
		if r != nil {
			fmt.Fprintln(os.Stderr, "raftlock-check: run directory kept:", r.dir)
		}
		return 2
	}
	if r.failed() {
		return 1
	}
	return 0
}

// runner is one run.
type runner struct {
	cfg         config
	dir         string
	out         io.Writer
	c           *procs.Cluster
	reg         *register.Server
	proxies     []*proxy.Proxy
	mu          sync.Mutex
	clients     map[string]*exec.Cmd // owner -> process
	faults      []faults.Fault
	start       int64
	clocks      *faults.Clocks  // --clock-faults
	clientRates map[int]float64 // client id -> clock rate (--clock-faults)
	// snapWait is how long a killed follower may stay down waiting for the
	// leader to snapshot past it (long when the binary snapshots only
	// every 30-60 s).
	snapWait time.Duration
	// ownClient makes the checker's own journalled calls (client 0): the
	// reads right after a restore and the closing operations.
	ownClient  *workload.Client
	ownJournal *history.Journal

	epilogue  []model.Expect
	finalErrs []model.Violation
	holdErrs  []model.Violation // (h), (i): locks or permits leaked past the workload
	holdNote  string            // why the closing holds could not be checked
	probeErrs []model.Violation // (l): a time-probe lock still held after the workload
	nodes     []model.NodeState
	notReady  []string
	stateCk   stateCheck // (g)
	rep       report

	// watch samples who leads for the whole run; the time bounds count
	// its outages (timewatch.go).
	watch     *leaderwatch.Watcher
	stopWatch func()
	watchEnd  int64
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.out, "%7.2fs  %s\n", time.Duration(history.Now()-r.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, cfg config, out io.Writer) (*runner, error) {
	r := &runner{cfg: cfg, out: out, clients: map[string]*exec.Cmd{}, start: history.Now()}
	var err error
	if cfg.out == "" {
		r.dir, err = os.MkdirTemp("", fmt.Sprintf("raftlock-check-%d-", cfg.seed))
	} else {
		r.dir = cfg.out
		err = os.MkdirAll(r.dir, 0o755)
	}
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "raftlock-check: seed %d, duration %v, %d clients, %d locks, mix %.2f, run dir %s\n", cfg.seed, cfg.duration, cfg.clients, cfg.locks, cfg.mix, r.dir)
	if cfg.seededBug != "" {
		fmt.Fprintf(out, "raftlock-check: SEEDED BUG %q (test build)\n", cfg.seededBug)
	}
	for _, d := range []string{"journal", "logs"} {
		if err := os.MkdirAll(filepath.Join(r.dir, d), 0o755); err != nil {
			return r, err
		}
	}
	if err := r.setup(); err != nil {
		r.teardown()
		return r, err
	}
	r.workload(ctx)
	r.finish(ctx)
	r.teardown()
	if err := r.check(); err != nil {
		return r, err
	}
	r.rep.print(r)
	if !r.failed() && !cfg.keep {
		os.RemoveAll(r.dir)
	}
	return r, nil
}

func (r *runner) setup() error {
	bin := r.cfg.bin
	if bin == "" {
		bin = filepath.Join(r.dir, "raftlock")
		cmd := exec.Command("go", "build", "-o", bin, "github.com/raftlock/raftlock/cmd/raftlock")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building raftlock: %w", err)
		}
	}
	// Raft's timeouts are the server's defaults: the failover the checker
	// measures is the one an operator gets. Snapshots come every 16
	// entries, so that restarted followers and restores meet them, except
	// with restore-crash: its crashed leader must come back while the new
	// leader's log still reaches below the restore, and a leader that
	// compacted meanwhile would heal it with a snapshot before anything
	// could act on the restore it alone holds (faults.RestoreCrash).
	threshold := "16"
	if slices.Contains(r.cfg.faults, faults.RestoreCrash) {
		threshold = "1000000"
	}
	extra := append([]string{"--snapshot-threshold", threshold, "--trailing-logs", "4"}, strings.Fields(r.cfg.serverFlags)...)
	if r.cfg.logStore != "" {
		extra = append(extra, "--log-store", r.cfg.logStore)
	}
	help, _ := exec.Command(bin, "serve", "--help").CombinedOutput()
	r.snapWait = r.cfg.snapWait
	if strings.Contains(string(help), "snapshot-interval") {
		// Snapshots every second: a follower down a few seconds must catch
		// up by snapshot without a long outage.
		extra = append(extra, "--snapshot-interval", "1s")
		r.snapWait = min(r.snapWait, 10*time.Second)
	}
	var env []string
	serverBug := r.cfg.seededBug != "" && proxy.ServerSide(r.cfg.seededBug)
	if serverBug {
		env = append(env, "RAFTLOCK_SEEDED_BUG="+r.cfg.seededBug)
	}
	if slices.Contains(r.cfg.faults, faults.RestoreCrash) {
		// The leader that takes a restore kills itself before replicating
		// it (faults.RestoreCrash; a raftlock_seeded_bugs build of raftlock).
		env = append(env, faults.CrashPointEnv+"="+faults.CrashPoint)
	}
	var err error
	r.c, err = procs.Start(procs.Options{Bin: bin, Dir: filepath.Join(r.dir, "logs"), Extra: extra, Env: env, Debug: r.cfg.clockFaults})
	if err != nil {
		return fmt.Errorf("starting the cluster: %w", err)
	}
	if r.cfg.clockFaults {
		if err := r.setupClocks(); err != nil {
			return err
		}
	}
	if serverBug {
		// A server built without the tag would pass and prove nothing.
		b, _ := os.ReadFile(r.c.Nodes[0].LogPath)
		if !strings.Contains(string(b), "SEEDED BUG \""+r.cfg.seededBug+"\"") {
			return fmt.Errorf("seeded bug %q lives in the server, but %s did not enable it (build it with -tags raftlock_seeded_bugs)", r.cfg.seededBug, bin)
		}
	}
	r.startWatch()
	r.reg = register.New()
	regURL, err := r.reg.Start()
	if err != nil {
		return err
	}
	var urls []string
	for _, n := range r.c.Nodes {
		urls = append(urls, n.URL())
	}
	if r.cfg.seededBug != "" && !serverBug {
		bug, err := proxy.Lookup(r.cfg.seededBug)
		if err != nil {
			return err
		}
		for i, n := range r.c.Nodes {
			p, err := proxy.Start(n.URL(), bug)
			if err != nil {
				return err
			}
			r.proxies = append(r.proxies, p)
			urls[i] = p.URL
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var locks []string
	for i := 0; i < r.cfg.locks; i++ {
		locks = append(locks, fmt.Sprintf("jobs/%d", i))
	}
	for id := 1; id <= r.cfg.clients; id++ {
		lf, err := os.Create(filepath.Join(r.dir, "logs", fmt.Sprintf("c%d.log", id)))
		if err != nil {
			return err
		}
		cmd := exec.Command(self, "client", "--id", strconv.Itoa(id), "--nodes", strings.Join(urls, ","),
			"--register", regURL, "--journal", filepath.Join(r.dir, "journal", fmt.Sprintf("c%d.jsonl", id)),
			"--locks", strings.Join(locks, ","), "--renew="+strconv.FormatBool(id%2 == 0),
			"--seed", strconv.FormatInt(r.cfg.seed*100+int64(id), 10),
			"--clock-rate", strconv.FormatFloat(r.clientRates[id], 'f', -1, 64),
			"--mix", strconv.FormatFloat(r.cfg.mix, 'f', -1, 64),
			"--time-probes", strconv.FormatFloat(r.cfg.timeProbes, 'f', -1, 64),
			"--ttl-locks", strings.Join(r.cfg.ttlLocks(), ","), "--sess-locks", strings.Join(r.cfg.sessLocks(), ","),
			"--time-probe-kinds", r.cfg.probeKinds, "--batch", strconv.FormatFloat(r.clientBatch(), 'f', -1, 64))
		if r.cfg.mix > 0 {
			var sems []string
			for name, limit := range r.cfg.semaphores() {
				sems = append(sems, fmt.Sprintf("%s=%d", name, limit))
			}
			sort.Strings(sems)
			cmd.Args = append(cmd.Args, "--rw-locks", strings.Join(r.cfg.rwLocks(), ","), "--semaphores", strings.Join(sems, ","))
		}
		cmd.Stdout, cmd.Stderr = lf, lf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return err
		}
		r.clients[fmt.Sprintf("c%d", id)] = cmd
	}
	r.logf("cluster up (%d nodes), %d clients started", len(r.c.Nodes), r.cfg.clients)
	return nil
}

// workload lets the clients run for the duration, injecting faults one at a
// time with calm periods between.
func (r *runner) workload(ctx context.Context) {
	rnd := rand.New(rand.NewSource(r.cfg.seed))
	inj := &faults.Injector{C: r.c, Rnd: rnd, TTL: 2 * time.Second, Logf: r.logf, SnapshotWait: r.snapWait,
		Clients: func(owner string) (int, bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if c, ok := r.clients[owner]; ok {
				return c.Process.Pid, true
			}
			return 0, false
		}}
	end := time.Now().Add(r.cfg.duration)
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	calm := func() time.Duration {
		return r.cfg.calmMin + time.Duration(rnd.Int63n(int64(r.cfg.calmMax-r.cfg.calmMin)+1))
	}
	sleep(calm())
	for i := rnd.Intn(max(1, len(r.cfg.faults))); len(r.cfg.faults) > 0 && ctx.Err() == nil && time.Until(end) > 12*time.Second; i++ {
		kind := r.cfg.faults[i%len(r.cfg.faults)]
		f := r.inject(ctx, inj, kind)
		r.faults = append(r.faults, f)
		r.logf("fault %s", f)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if _, err := r.c.WaitReady(rctx); err != nil {
			r.notReady = append(r.notReady, fmt.Sprintf("after %s: %v", f.Kind, err))
			r.logf("cluster not ready 30s after %s: %v", f.Kind, err)
		}
		cancel()
		sleep(calm())
	}
	sleep(time.Until(end))
}

// finish stops the clients, heals the cluster, makes the closing
// acknowledged operations of (d) and reads every node's final state.
func (r *runner) finish(ctx context.Context) {
	r.mu.Lock()
	for _, c := range r.clients {
		c.Process.Signal(syscall.SIGCONT)
		c.Process.Signal(syscall.SIGTERM)
	}
	r.mu.Unlock()
	for _, c := range r.clients {
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			c.Process.Kill()
			<-done
		}
	}
	r.logf("workload stopped")
	r.stateCk.why = "the final check did not run"
	for _, n := range r.c.Nodes {
		if !n.Running() {
			n.Start()
		}
		n.Resume()
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := r.c.WaitReady(rctx); err != nil {
		r.finalErrs = append(r.finalErrs, model.Violation{Property: "d", Detail: "cluster not ready for the final check: " + err.Error()})
		r.stateCk.why = "cluster not ready at the end: " + err.Error()
		return
	}
	cl, err := r.own()
	if err != nil {
		r.finalErrs = append(r.finalErrs, model.Violation{Property: "d", Detail: err.Error()})
		return
	}
	for i := 0; i < r.cfg.locks; i++ {
		name := fmt.Sprintf("jobs/%d", i)
		lease := fmt.Sprintf("final-%02d-%012d", i, r.cfg.seed)
		var got history.Entry
		for try := 0; try < 5 && got.Outcome != history.OK; try++ {
			got = cl.Call(history.Entry{Op: history.Acquire, Name: name, Lease: lease, TTLMs: 60000}, "/v1/locks/acquire",
				map[string]any{"name": name, "owner": "final", "ttl_ms": 60000, "lease_id": lease, "wait_ms": 15000})
		}
		if got.Outcome != history.OK {
			r.finalErrs = append(r.finalErrs, model.Violation{Property: "d", Detail: fmt.Sprintf("final acquire of %q: %s %s", name, got.Outcome, got.Err)})
			continue
		}
		tok := got.Token
		rn := cl.Call(history.Entry{Op: history.Renew, Name: name, Lease: lease, TTLMs: 45000}, "/v1/locks/renew",
			map[string]any{"name": name, "lease_id": lease, "ttl_ms": 45000})
		if rn.Outcome != history.OK {
			r.finalErrs = append(r.finalErrs, model.Violation{Property: "d", Detail: fmt.Sprintf("final renew of %q: %s %s", name, rn.Outcome, rn.Err)})
			continue
		}
		if i%2 == 1 {
			rl := cl.Call(history.Entry{Op: history.Release, Name: name, Lease: lease}, "/v1/locks/release",
				map[string]any{"name": name, "lease_id": lease})
			if rl.Outcome != history.OK {
				r.finalErrs = append(r.finalErrs, model.Violation{Property: "d", Detail: fmt.Sprintf("final release of %q: %s %s", name, rl.Outcome, rl.Err)})
				continue
			}
			r.epilogue = append(r.epilogue, model.Expect{Name: name})
		} else {
			r.epilogue = append(r.epilogue, model.Expect{Name: name, Held: true, Owner: "final", Token: tok, TTLMs: 45000})
		}
	}
	if r.cfg.mix > 0 {
		r.finishHolds(ctx, cl)
	}
	if r.cfg.timeProbes > 0 {
		r.finishProbes(ctx, cl)
	}
	// The closing holds may take a while: the final read gets a fresh bound.
	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	defer fcancel()
	r.nodes = r.readFinal(fctx)
	r.logf("final state read from %d nodes", len(r.nodes))
	r.stateCk = r.runStateCheck(ctx)
	if r.stateCk.ran {
		r.logf("state check at index %d read from %d nodes", r.stateCk.index, len(r.stateCk.nodes))
	} else {
		r.logf("state check not run: %s", r.stateCk.why)
	}
}

// readFinal waits until every node has applied what the leader committed,
// then reads each node's own state.
func (r *runner) readFinal(ctx context.Context) []model.NodeState {
	var target uint64
	if l, err := r.c.Leader(ctx); err == nil {
		if i, err := r.c.Info(ctx, l); err == nil {
			target = i.CommitIndex
		}
	}
	var out []model.NodeState
	for _, n := range r.c.Nodes {
		ns := model.NodeState{ID: n.ID}
		for {
			i, err := r.c.Info(ctx, n)
			if err == nil && i.AppliedIndex >= target {
				ns.Applied = i.AppliedIndex
				break
			}
			if ctx.Err() != nil {
				ns.Err = fmt.Sprintf("did not apply up to %d: %v", target, err)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if ns.Err == "" {
			var l struct {
				Locks []model.LockView `json:"locks"`
			}
			if err := r.c.Get(ctx, n, "/v1/locks?prefix=&stale=true&limit=10000", &l); err != nil {
				ns.Err = err.Error()
			}
			ns.Locks = l.Locks
		}
		out = append(out, ns)
	}
	return out
}

func (r *runner) teardown() {
	r.endWatch()
	r.mu.Lock()
	for _, c := range r.clients {
		c.Process.Kill()
	}
	r.mu.Unlock()
	for _, p := range r.proxies {
		p.Close()
	}
	if r.c != nil {
		for _, n := range r.c.Nodes {
			n.Terminate()
		}
	}
	if r.reg != nil {
		r.reg.Close()
	}
	if r.ownJournal != nil {
		r.ownJournal.Close()
	}
}

// own returns the checker's own client, journalling as client 0.
func (r *runner) own() (*workload.Client, error) {
	if r.ownClient != nil {
		return r.ownClient, nil
	}
	j, err := history.Create(filepath.Join(r.dir, "journal", "c0.jsonl"))
	if err != nil {
		return nil, err
	}
	var urls []string
	for _, n := range r.c.Nodes {
		urls = append(urls, n.URL())
	}
	r.ownJournal = j
	r.ownClient = workload.New(workload.Config{ID: 0, Nodes: urls, Timeout: 20 * time.Second, Journal: j, Seed: r.cfg.seed})
	return r.ownClient, nil
}

// clientBatch is the share of calls the workload batches: none under a
// seeded bug that the relay plays, since a batch would pass it by.
func (r *runner) clientBatch() float64 {
	if r.cfg.seededBug != "" && !proxy.ServerSide(r.cfg.seededBug) {
		return 0
	}
	return r.cfg.batch
}
