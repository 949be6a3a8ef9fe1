package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/leaderwatch"
	"github.com/raftlock/raftlock/cmd/raftlock-check/register"
	"github.com/raftlock/raftlock/cmd/raftlock-check/workload"
)

// extConfig is what the workload flags say.
type extConfig struct {
	endpoints []string
	duration  time.Duration
	out       string
	marks     string
	clients   int
	locks     int
	seed      int64
	drift     float64
	timeout   time.Duration
	interval  time.Duration
	prefix    string
	mix       float64 // share of mixed cycles (sessions, semaphores, shared locks)
	batch     float64 // share of batchable lock calls sent in a batch (workload/batch.go)
}

const workloadUsage = `Usage: raftlock-check workload --endpoints URL,URL,... [flags]

Runs the checker's workload against a cluster that something else runs and
faults (scripts/chaos-*.sh): concurrent clients take, renew and release locks
and write with their tokens to a fenced and an unfenced register served from
this process, while GET /v1/cluster is sampled on every endpoint about every
50 ms. It stops after --duration or at SIGTERM/SIGINT, then prints a summary
and checks (a) no two valid holders of a lock at once, (b) tokens of a lock
increase and retries keep them, (c) the fenced register never accepted a
lower token and kept every acknowledged write.

Fault windows come from --marks, a file the fault driver appends lines to:
    <unix time in ns> start <kind> <target>
    <unix time in ns> end <kind> <target>
e.g.  echo "$(date +%s%N) start kill n2" >>marks. A start is paired with the
next end of the same kind and target; one with no end lasts to the end.

Exit status: 0 when every property holds, 1 on a violation (or when no lock
operation succeeded at all), 2 when the run could not be made.

Flags:
`

func parseWorkload(args []string, stderr io.Writer) (extConfig, error) {
	var c extConfig
	var endpoints string
	fs := flag.NewFlagSet("raftlock-check workload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		io.WriteString(stderr, workloadUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&endpoints, "endpoints", os.Getenv("RAFTLOCK_ENDPOINTS"), "comma-separated node base URLs (env RAFTLOCK_ENDPOINTS)")
	fs.DurationVar(&c.duration, "duration", time.Minute, "stop after this long (SIGTERM or SIGINT stops it earlier)")
	fs.StringVar(&c.out, "out", "", "directory for journals, register log, leader timeline and summary (default: a temporary dir, removed when every property holds)")
	fs.StringVar(&c.marks, "marks", "", "fault marks file (default: DIR/marks when --out is given)")
	fs.IntVar(&c.clients, "clients", 6, "concurrent clients (odd ones hold without renewing, often past their TTL)")
	fs.IntVar(&c.locks, "locks", 3, "lock names")
	fs.Int64Var(&c.seed, "seed", 0, "random seed (0: from the clock)")
	fs.Float64Var(&c.drift, "drift", 0.02, "clock rate drift a client allows for in (a)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "per-request timeout")
	fs.DurationVar(&c.interval, "sample", 50*time.Millisecond, "how often /v1/cluster is sampled on each endpoint")
	fs.StringVar(&c.prefix, "lock-prefix", "", "lock name prefix (default: chaos/<seed>/, so runs never meet each other's locks)")
	fs.Float64Var(&c.batch, "batch", 0, "share of the lock cycle's acquires (without a wait), renews and releases sent in a POST /v1/batch beside a companion release that changes nothing (0: none, the default, so the chaos scripts' runs are unchanged)")
	fs.Float64Var(&c.mix, "mix", 0, "share of cycles that use sessions, semaphore permits and shared locks (PREFIXrw/N, PREFIXsem/N), checked by (h), (i), (j)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimRight(strings.TrimSpace(e), "/"); e != "" {
			c.endpoints = append(c.endpoints, e)
		}
	}
	if len(c.endpoints) == 0 {
		return c, errors.New("--endpoints is required")
	}
	if c.clients < 1 || c.locks < 1 || c.duration <= 0 {
		return c, errors.New("--clients, --locks and --duration must be positive")
	}
	if c.seed == 0 {
		c.seed = time.Now().UnixNano() % 1_000_000_000
	}
	if c.prefix == "" {
		c.prefix = fmt.Sprintf("chaos/%d/", c.seed)
	}
	if c.marks == "" && c.out != "" {
		c.marks = filepath.Join(c.out, "marks")
	}
	return c, nil
}

func workloadMain(args []string) int {
	cfg, err := parseWorkload(args, os.Stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(os.Stderr, "raftlock-check workload:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	s, err := runExternal(ctx, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "raftlock-check workload:", err)
		return 2
	}
	s.print(os.Stdout)
	if s.dir != "" {
		if f, err := os.Create(filepath.Join(s.dir, "summary.txt")); err == nil {
			s.print(f)
			f.Close()
		}
	}
	if s.failed() {
		return 1
	}
	if cfg.out == "" {
		os.RemoveAll(s.dir)
	}
	return 0
}

// runExternal runs the clients and the leader watcher until ctx ends, then
// reads back the journals, the register log and the marks.
func runExternal(ctx context.Context, cfg extConfig, logw io.Writer) (*extSummary, error) {
	dir := cfg.out
	var err error
	if dir == "" {
		dir, err = os.MkdirTemp("", fmt.Sprintf("raftlock-workload-%d-", cfg.seed))
	}
	if err == nil {
		err = os.MkdirAll(filepath.Join(dir, "journal"), 0o755)
	}
	if err != nil {
		return nil, err
	}
	// Marks carry wall-clock times (what a shell script can read); the
	// journal carries CLOCK_MONOTONIC. One reading of both converts.
	wall0, mono0 := time.Now().UnixNano(), history.Now()
	reg := register.New()
	regURL, err := reg.Start()
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	var locks, rwLocks []string
	sems := map[string]int64{}
	for i := 0; i < cfg.locks; i++ {
		locks = append(locks, fmt.Sprintf("%sjobs/%d", cfg.prefix, i))
		rwLocks = append(rwLocks, fmt.Sprintf("%srw/%d", cfg.prefix, i))
		sems[fmt.Sprintf("%ssem/%d", cfg.prefix, i)] = int64(2 + i%2)
	}
	var journals []*history.Journal
	defer func() {
		for _, j := range journals {
			j.Close()
		}
	}()
	var clients []*workload.Client
	for id := 1; id <= cfg.clients; id++ {
		j, err := history.Create(filepath.Join(dir, "journal", fmt.Sprintf("c%d.jsonl", id)))
		if err != nil {
			return nil, err
		}
		journals = append(journals, j)
		clients = append(clients, workload.New(workload.Config{
			ID: id, Nodes: cfg.endpoints, Register: regURL, Locks: locks, Renew: id%2 == 0,
			Seed: cfg.seed*100 + int64(id), Timeout: cfg.timeout, Journal: j,
			Mix: cfg.mix, RWLocks: rwLocks, Semaphores: sems, Batch: cfg.batch,
		}))
	}
	fmt.Fprintf(logw, "raftlock-check workload: seed %d, %d clients, %d locks under %q, endpoints %s, dir %s\n",
		cfg.seed, cfg.clients, cfg.locks, cfg.prefix, strings.Join(cfg.endpoints, ","), dir)
	w := &leaderwatch.Watcher{Endpoints: cfg.endpoints, Interval: cfg.interval}
	start := history.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	wctx, wcancel := context.WithCancel(context.Background())
	go func() { defer wg.Done(); w.Run(wctx) }()
	done := make(chan struct{})
	var cwg sync.WaitGroup
	for _, c := range clients {
		cwg.Add(1)
		go func() { defer cwg.Done(); c.Run(ctx) }()
	}
	go func() { cwg.Wait(); close(done) }()
	<-ctx.Done()
	// A client finishes its cycle (write, release) with requests that may
	// each take the timeout; past that, what it has not journalled as
	// returned counts as unknown.
	select {
	case <-done:
	case <-time.After(4*cfg.timeout + 2*time.Second):
		fmt.Fprintln(logw, "raftlock-check workload: some clients did not stop in time; their last calls count as unknown")
	}
	end := history.Now()
	wcancel()
	wg.Wait()

	s := &extSummary{cfg: cfg, dir: dir, start: start, end: end, ticks: w.Timeline()}
	for _, j := range journals {
		j.Close()
	}
	journals = nil
	entries, err := history.ReadDir(filepath.Join(dir, "journal"))
	if err != nil {
		return nil, err
	}
	s.ops = history.Pair(entries)
	s.regLog = reg.Log()
	if cfg.marks != "" {
		s.windows, err = readMarks(cfg.marks, wall0-mono0, end)
		if err != nil {
			return nil, err
		}
	}
	s.check()
	writeJSON(filepath.Join(dir, "registers.json"), s.regLog)
	writeJSON(filepath.Join(dir, "leader-timeline.json"), s.ticks)
	return s, nil
}

func writeJSON(path string, v any) {
	if b, err := json.Marshal(v); err == nil {
		os.WriteFile(path, b, 0o644)
	}
}
