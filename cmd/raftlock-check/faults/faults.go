// Package faults injects the checker's faults into a running cluster and
// its workload clients, one at a time.
package faults

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// Kinds of fault.
const (
	LeaderKill      = "leader-kill"
	LeaderPause     = "leader-pause"
	HolderPause     = "holder-pause"
	FollowerRestart = "follower-restart"
	Transfer        = "leader-transfer"
	// Restore saves a backup (GET /v1/snapshot) and restores it 0.5-3 s
	// later (POST /v1/snapshot) while the workload keeps writing
	// (restore.go).
	Restore = "restore"
	// RestoreCrash is a restore whose leader kills itself right after raft
	// installed it, before replicating it, and is restarted once the others
	// have a leader (restore.go). It needs raftlock built with
	// -tags raftlock_seeded_bugs, started with RAFTLOCK_CRASH_POINT (the
	// checker does that when it is listed), and is not in All.
	RestoreCrash = "restore-crash"
)

// All lists every kind, in the order a run cycles through them.
var All = []string{LeaderKill, HolderPause, LeaderPause, FollowerRestart, Transfer, Restore}

// Fault is one injected fault.
type Fault struct {
	Kind   string
	Target string
	Start  int64 // CLOCK_MONOTONIC
	End    int64
	Detail string
	Err    string
	// Restore is set by a restore fault that sent its restore.
	Restore *model.Restore
}

func (f Fault) String() string {
	s := fmt.Sprintf("%-16s %-4s %6.2fs  %s", f.Kind, f.Target, time.Duration(f.End-f.Start).Seconds(), f.Detail)
	if f.Err != "" {
		s += " ERROR: " + f.Err
	}
	return s
}

// Injector holds what faults act on.
type Injector struct {
	C       *procs.Cluster
	Rnd     *rand.Rand
	TTL     time.Duration                  // the workload's typical TTL (leader pauses scale with it)
	Clients func(owner string) (int, bool) // owner -> pid of a workload client
	Logf    func(format string, args ...any)
	// SnapshotWait, when positive, keeps a killed follower down until the
	// leader has taken a new snapshot (compacting its log past the
	// follower), at most this long, so that it must catch up by snapshot.
	SnapshotWait time.Duration
}

func (in *Injector) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (in *Injector) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(in.Rnd.Int63n(int64(hi-lo)+1))
}

// Inject runs one fault of the given kind to its end (the node restarted or
// resumed) and returns its record.
func (in *Injector) Inject(ctx context.Context, kind string) Fault {
	f := Fault{Kind: kind, Start: history.Now()}
	err := func() error {
		// readyCtx bounds the wait for a leader and the fault's requests.
		readyCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		leader, err := in.C.WaitReady(readyCtx)
		if err != nil {
			return err
		}
		f.Start = history.Now()
		switch kind {
		case LeaderKill:
			return in.killLeader(ctx, readyCtx, leader, &f)
		case LeaderPause:
			return in.pauseLeader(ctx, readyCtx, leader, &f)
		case Transfer:
			return in.transferLeadership(ctx, readyCtx, leader, &f)
		case FollowerRestart:
			return in.restartFollower(ctx, readyCtx, leader, &f)
		case HolderPause:
			return in.pauseHolder(ctx, readyCtx, leader, &f)
		case Restore:
			return in.restoreBackup(ctx, readyCtx, leader, &f)
		case RestoreCrash:
			return in.restoreCrash(ctx, readyCtx, leader, &f)
		}
		return fmt.Errorf("unknown fault %q", kind)
	}()
	if err != nil {
		f.Err = err.Error()
	}
	f.End = history.Now()
	return f
}

// killLeader kills the leader with SIGKILL and restarts it after up to 5s.
func (in *Injector) killLeader(ctx, readyCtx context.Context, leader *procs.Node, f *Fault) error {
	f.Target = leader.ID
	down := in.between(0, 5*time.Second)
	leader.Kill()
	f.Detail = fmt.Sprintf("kill -9, restarted after %v", down.Round(time.Millisecond))
	in.sleep(ctx, down)
	return leader.Start()
}

// pauseLeader stops the leader with SIGSTOP for TTL/2 to 3×TTL.
func (in *Injector) pauseLeader(ctx, readyCtx context.Context, leader *procs.Node, f *Fault) error {
	f.Target = leader.ID
	stopped := in.between(in.TTL/2, 3*in.TTL)
	f.Detail = fmt.Sprintf("SIGSTOP for %v", stopped.Round(time.Millisecond))
	leader.Pause()
	in.sleep(ctx, stopped)
	return leader.Resume()
}

// transferLeadership asks the leader to hand leadership over and waits for
// the new one.
func (in *Injector) transferLeadership(ctx, readyCtx context.Context, leader *procs.Node, f *Fault) error {
	f.Target = leader.ID
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, leader.URL()+"/v1/cluster/transfer-leadership", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("transfer-leadership: status %d", resp.StatusCode)
	}
	newLeader, err := in.C.WaitReady(readyCtx)
	if err == nil {
		f.Detail = "new leader " + newLeader.ID
	}
	return err
}

// restartFollower kills a follower, keeps it down for 2-5s and then, up to
// SnapshotWait, until the leader snapshots (so that it may have to catch up
// by one), restarts it and waits for it to catch up.
func (in *Injector) restartFollower(ctx, readyCtx context.Context, leader *procs.Node, f *Fault) error {
	var follower *procs.Node
	for _, n := range in.C.Nodes {
		if n != leader && n.Running() {
			follower = n
		}
	}
	if follower == nil {
		return fmt.Errorf("no follower")
	}
	f.Target = follower.ID
	installedBefore := countInLog(follower.LogPath, "Installed remote snapshot")
	leaderSnapshots := countInLog(leader.LogPath, "snapshot complete up to")
	follower.Kill()
	killedAt := time.Now()
	in.sleep(ctx, in.between(2*time.Second, 5*time.Second))
	for time.Since(killedAt) < in.SnapshotWait && ctx.Err() == nil && countInLog(leader.LogPath, "snapshot complete up to") == leaderSnapshots {
		in.sleep(ctx, 200*time.Millisecond)
	}
	down := time.Since(killedAt)
	if err := follower.Start(); err != nil {
		return err
	}
	if err := in.caughtUp(ctx, follower, 20*time.Second); err != nil {
		return err
	}
	how := "by log replay"
	if countInLog(follower.LogPath, "Installed remote snapshot") > installedBefore {
		how = "by snapshot"
	}
	f.Detail = fmt.Sprintf("kill -9, down %v, caught up %s", down.Round(time.Millisecond), how)
	return nil
}

// pauseHolder stops a client that holds a lock with SIGSTOP for 1.5 to 3
// times its TTL.
func (in *Injector) pauseHolder(ctx, readyCtx context.Context, leader *procs.Node, f *Fault) error {
	var locks struct {
		Locks []model.LockView `json:"locks"`
	}
	for try := 0; ; try++ {
		if err := in.C.Get(readyCtx, leader, "/v1/locks?prefix=", &locks); err != nil {
			return err
		}
		in.Rnd.Shuffle(len(locks.Locks), func(i, j int) { locks.Locks[i], locks.Locks[j] = locks.Locks[j], locks.Locks[i] })
		if hasRWLocks(locks.Locks) && in.Rnd.Intn(2) == 0 {
			// Half the time pause a holder of an rw lock (the mixed
			// cycles' names, often held through a session), so that
			// sessions run out while their client is stopped.
			sort.SliceStable(locks.Locks, func(i, j int) bool {
				return strings.HasPrefix(locks.Locks[i].Name, "rw/") && !strings.HasPrefix(locks.Locks[j].Name, "rw/")
			})
		}
		for _, l := range locks.Locks {
			if strings.HasPrefix(l.Name, "ttl/") || strings.HasPrefix(l.Name, "sttl/") {
				// The time probes' names: their leases are abandoned
				// (pausing the client changes nothing there) and last up
				// to 10 s, which would make the pause take half a run.
				continue
			}
			pid, ok := in.Clients(l.Owner)
			if !ok {
				continue
			}
			ttl := time.Duration(l.TTLMs) * time.Millisecond
			stopped := in.between(ttl*3/2, 3*ttl)
			f.Target = l.Owner
			f.Detail = fmt.Sprintf("SIGSTOP holder of %q (token %d, ttl %v) for %v", l.Name, l.Token, ttl, stopped.Round(time.Millisecond))
			syscall.Kill(pid, syscall.SIGSTOP)
			in.sleep(ctx, stopped)
			return syscall.Kill(pid, syscall.SIGCONT)
		}
		if try > 40 || ctx.Err() != nil {
			return fmt.Errorf("no client held a lock")
		}
		in.sleep(ctx, 50*time.Millisecond)
	}
}

// caughtUp waits until n has applied everything the leader had committed
// when n came back.
func (in *Injector) caughtUp(ctx context.Context, n *procs.Node, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var target uint64
	for {
		if target == 0 {
			if l, err := in.C.Leader(ctx); err == nil {
				if i, err := in.C.Info(ctx, l); err == nil {
					target = i.CommitIndex
				}
			}
		} else if i, err := in.C.Info(ctx, n); err == nil && i.AppliedIndex >= target {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not catch up to index %d within %v", n.ID, target, limit)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func countInLog(path, s string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), s)
}

// hasRWLocks reports whether any lock is one of the mixed cycles'
// rw locks; without them (--mix 0) the fault draws what it always drew.
func hasRWLocks(locks []model.LockView) bool {
	for _, l := range locks {
		if strings.HasPrefix(l.Name, "rw/") {
			return true
		}
	}
	return false
}
