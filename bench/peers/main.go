// Command peers drives raftlock's peers with the load `raftlock bench` puts
// on raftlock: N workers, each running acquire+release cycles on its own lock
// for a duration, reporting cycles/s and acquire/release p50/p99. It is a
// module of its own so that raftlock does not pull etcd's client.
//
//	peers etcd  --endpoints 127.0.0.1:2379 --workers 16 --duration 10s
//	peers redis --addr 127.0.0.1:6379 --workers 16 --duration 10s
//	peers fsync --dir DIR [--count 1000]   fdatasync latency of 4 KiB appends
//
// --json prints one JSON object (the same keys for every system);
// scripts/bench-compare.sh reads it.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// locker is one worker's lock: acquire and release it once.
type locker interface {
	acquire(ctx context.Context) error
	release(ctx context.Context) error
	close()
}

type result struct {
	System       string  `json:"system"`
	Workers      int     `json:"workers"`
	DurationMs   int64   `json:"duration_ms"`
	Cycles       int64   `json:"cycles"`
	CyclesPerSec float64 `json:"cycles_per_sec"`
	AcquireP50   float64 `json:"acquire_p50_ms"`
	AcquireP99   float64 `json:"acquire_p99_ms"`
	ReleaseP50   float64 `json:"release_p50_ms"`
	ReleaseP99   float64 `json:"release_p99_ms"`
	Errors       int64   `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	// With --server-pids: the servers' CPU over the window, in all and
	// per process, per cycle completed.
	CPUMs     float64   `json:"cpu_ms,omitempty"`
	CPUPerCyc float64   `json:"cpu_us_per_cycle,omitempty"`
	Processes []procCPU `json:"processes,omitempty"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: peers etcd|redis|fsync [flags]")
		os.Exit(2)
	}
	sys, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet(sys, flag.ExitOnError)
	workers := fs.Int("workers", 16, "concurrent workers, one lock each")
	duration := fs.Duration("duration", 10*time.Second, "how long to run")
	timeout := fs.Duration("timeout", 5*time.Second, "per-call timeout")
	ttl := fs.Duration("ttl", 10*time.Second, "lease TTL (etcd session TTL, Redis PX)")
	jsonOut := fs.Bool("json", false, "print one JSON object")
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "etcd: comma-separated client endpoints")
	addr := fs.String("addr", "127.0.0.1:6379", "redis: address")
	dir := fs.String("dir", ".", "fsync: directory on the disk to probe")
	count := fs.Int("count", 1000, "fsync: appends to time")
	pids := fs.String("server-pids", "", "server processes to report the CPU of: NAME=PID,... or PID,...")
	_ = fs.Parse(args)
	procs, err := parseServerPids(*pids)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(2)
	}

	var r result
	switch sys {
	case "fsync":
		err = fsyncProbe(*dir, *count, *jsonOut)
		if err != nil {
			fmt.Fprintln(os.Stderr, "peers fsync:", err)
			os.Exit(1)
		}
		return
	case "etcd":
		var mk func(w int) (locker, error)
		var done func()
		mk, done, err = newEtcd(strings.Split(*endpoints, ","), *ttl, *timeout)
		if err == nil {
			r, err = run(sys, *workers, *duration, *timeout, procs, mk)
			done()
		}
	case "redis":
		r, err = run(sys, *workers, *duration, *timeout, procs, func(w int) (locker, error) {
			return newRedisLocker(*addr, w, *ttl, *timeout)
		})
	default:
		err = fmt.Errorf("unknown system %q", sys)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "peers %s: %v\n", sys, err)
		os.Exit(1)
	}
	if *jsonOut {
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	}
	fmt.Printf("%s, %d workers: %.1f cycles/s; acquire p50 %.2f ms p99 %.2f ms; release p50 %.2f ms p99 %.2f ms; %d errors %s\n",
		r.System, r.Workers, r.CyclesPerSec, r.AcquireP50, r.AcquireP99, r.ReleaseP50, r.ReleaseP99, r.Errors, r.FirstError)
}

// runID keeps one run's keys apart from another's.
func runID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// run sets up one locker per worker, then lets every worker cycle until the
// duration is over.
func run(sys string, workers int, duration, timeout time.Duration, procs []serverProc, mk func(w int) (locker, error)) (result, error) {
	lockers := make([]locker, workers)
	defer func() {
		for _, l := range lockers {
			if l != nil {
				l.close()
			}
		}
	}()
	for w := range lockers {
		l, err := mk(w)
		if err != nil {
			return result{}, fmt.Errorf("worker %d: %w", w, err)
		}
		lockers[w] = l
	}
	var (
		cycles, errs atomic.Int64
		firstErr     atomic.Value
		wg           sync.WaitGroup
	)
	acq := make([][]time.Duration, workers)
	rel := make([][]time.Duration, workers)
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	call := func(f func(context.Context) error) (time.Duration, error) {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		t := time.Now()
		err := f(c)
		return time.Since(t), err
	}
	fail := func(err error) {
		errs.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
	}
	cpuBefore, err := cpuOf(procs)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	for w, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				d, err := call(l.acquire)
				if err != nil {
					fail(err)
					continue
				}
				acq[w] = append(acq[w], d)
				d, err = call(l.release)
				if err != nil {
					fail(err)
					continue
				}
				rel[w] = append(rel[w], d)
				cycles.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpuAfter, err := cpuOf(procs)
	if err != nil {
		return result{}, err
	}
	r := result{System: sys, Workers: workers, DurationMs: elapsed.Milliseconds(), Cycles: cycles.Load(), Errors: errs.Load()}
	var total time.Duration
	for i, p := range procs {
		d := cpuAfter[i] - cpuBefore[i]
		total += d
		r.Processes = append(r.Processes, procCPU{Name: p.name, PID: p.pid, CPUMs: float64(d.Microseconds()) / 1000,
			UsPerCycle: float64(d.Microseconds()) / float64(max(r.Cycles, 1))})
	}
	if len(procs) > 0 {
		r.CPUMs, r.CPUPerCyc = float64(total.Microseconds())/1000, float64(total.Microseconds())/float64(max(r.Cycles, 1))
	}
	r.CyclesPerSec = float64(r.Cycles) / elapsed.Seconds()
	r.AcquireP50, r.AcquireP99 = pcts(slices.Concat(acq...))
	r.ReleaseP50, r.ReleaseP99 = pcts(slices.Concat(rel...))
	if s, ok := firstErr.Load().(string); ok {
		r.FirstError = s
	}
	if r.Cycles == 0 {
		return r, errors.New("no cycle completed: " + r.FirstError)
	}
	return r, nil
}

// pcts is p50 and p99 in ms, nearest rank, as raftlock bench computes them.
func pcts(d []time.Duration) (p50, p99 float64) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	at := func(p float64) float64 {
		i := int(p*float64(len(d))+0.999999) - 1
		return float64(d[min(max(i, 0), len(d)-1)].Microseconds()) / 1000
	}
	return at(0.50), at(0.99)
}
