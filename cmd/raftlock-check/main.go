// Command raftlock-check is a Jepsen-style checker for raftlock. It starts a
// three-node cluster of real "raftlock serve" processes on loopback, runs
// workload clients as separate processes (it re-executes itself as
// "raftlock-check client"), injects faults one at a time (leader kill -9,
// leader SIGSTOP, lock-holder SIGSTOP, follower kill and restart, leadership
// transfer), and checks the merged history: (a) mutual exclusion of valid
// leases, (b) fencing tokens, (c) fenced and unfenced registers, (d) the
// final state of every node, (e) linearizability for a lease-lock model with
// porcupine, and, for sessions, fenced semaphores and shared locks (a share
// of the cycles, --mix), (h) sessions end once and their holds with them,
// (i) never more than limit valid permits and per-slot tokens rise, (j) an
// exclusive hold excludes every other, and time bounds (a share of the
// cycles, --time-probes): (l) an abandoned lease ends by its TTL plus the
// leaderless time seen, (m) a parked acquire is granted promptly after the
// release that freed its lock, (n) a session's leases end with it. It exits non-zero on any violation
// and then keeps the run directory: journals, node logs and porcupine's
// HTML visualisation.
//
//	raftlock-check [--duration 2m] [--seed N] [--raftlock-bin PATH] [--out DIR]
//
// "raftlock-check workload" instead runs the same workload clients (as
// goroutines) against a cluster that something else runs and faults, such
// as scripts/chaos-*.sh: it samples who leads, reads fault windows from a
// marks file, and checks (a), (b) and (c).
//
//	raftlock-check workload --endpoints URL,URL,URL [--duration 1m] [--out DIR] [--marks FILE]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/workload"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "client" {
		os.Exit(clientMain(args[1:]))
	}
	if len(args) > 0 && args[0] == "workload" {
		os.Exit(workloadMain(args[1:]))
	}
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	os.Exit(runMain(args))
}

// clientMain is one workload client process.
func clientMain(args []string) int {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	id := fs.Int("id", 1, "client id (owner c<id>)")
	nodes := fs.String("nodes", "", "comma-separated node base URLs")
	reg := fs.String("register", "", "register server base URL")
	journal := fs.String("journal", "", "journal file")
	locks := fs.String("locks", "", "comma-separated lock names")
	renew := fs.Bool("renew", false, "renew while holding (else overrun on purpose)")
	seed := fs.Int64("seed", 1, "random seed")
	timeout := fs.Duration("timeout", 2*time.Second, "per-request timeout")
	rate := fs.Float64("clock-rate", 0, "this client's clock rate against CLOCK_MONOTONIC (0: 1)")
	mix := fs.Float64("mix", 0, "share of cycles using sessions, semaphores or shared locks")
	rwLocks := fs.String("rw-locks", "", "comma-separated lock names for shared and session cycles")
	sems := fs.String("semaphores", "", "comma-separated NAME=LIMIT semaphores")
	timeProbes := fs.Float64("time-probes", 0, "share of cycles probing the time bounds")
	ttlLocks := fs.String("ttl-locks", "", "comma-separated lock names for the time probes' TTL leases")
	sessLocks := fs.String("sess-locks", "", "comma-separated lock names for the time probes' session leases")
	batch := fs.Float64("batch", 0, "share of lock acquires (without a wait), renews and releases sent in a batch with a companion release")
	probeKinds := fs.String("time-probe-kinds", "", "comma-separated time-probe cycles to run (abandon, session, handoff; empty: all)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	j, err := history.Create(*journal)
	if err != nil {
		fmt.Fprintln(os.Stderr, "raftlock-check client:", err)
		return 1
	}
	defer j.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	semaphores, err := parseSemaphores(*sems)
	if err != nil {
		fmt.Fprintln(os.Stderr, "raftlock-check client:", err)
		return 2
	}
	var rw []string
	if *rwLocks != "" {
		rw = strings.Split(*rwLocks, ",")
	}
	workload.New(workload.Config{
		ID: *id, Nodes: strings.Split(*nodes, ","), Register: *reg, Locks: strings.Split(*locks, ","),
		Renew: *renew, Seed: *seed, Timeout: *timeout, Journal: j, ClockRate: *rate,
		Mix: *mix, RWLocks: rw, Semaphores: semaphores,
		TimeProbes: *timeProbes, TTLLocks: splitList(*ttlLocks), SessLocks: splitList(*sessLocks),
		ProbeKinds: splitList(*probeKinds), Batch: *batch,
	}).Run(ctx)
	return 0
}

// splitList splits a comma-separated list ("" is none).
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// parseSemaphores reads "NAME=LIMIT,..." ("" is none).
func parseSemaphores(s string) (map[string]int64, error) {
	out := map[string]int64{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		name, limit, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(limit, 10, 64)
		if !ok || err != nil || n < 1 {
			return nil, fmt.Errorf("--semaphores: want NAME=LIMIT, got %q", kv)
		}
		out[name] = n
	}
	return out, nil
}
