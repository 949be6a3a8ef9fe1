package raftnode

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// DefaultReadyMaxLag is how many entries a follower may trail the leader's
// commit index and still be ready: far more than a healthy follower trails
// under load (a few batches of 256), far less than one catching up after
// hours away.
const DefaultReadyMaxLag = 4096

// Ready reports whether a leader is known and this node's state is current
// enough to serve. A restarted node hears no commit index from heartbeats
// (its own starts at 0), so it first waits until its machine has applied
// what its log held when it started: until then its state is older than what
// it served before the restart. After that:
//   - a leader is ready once its Barrier of this term is done (readyTerm),
//     which is when it starts serving linearizable reads;
//   - a follower is ready while it trails by at most Config.ReadyMaxLag
//     entries, both its own commit index and the leader's (its own stops at
//     its last log entry, so alone it would say ready after each batch of a
//     long catch-up).
//
// Neither compares applied with commit exactly: they differ for moments
// after every commit, and a probe that flickered with every append would be
// useless to a load balancer. A node whose state diverged from the leader's
// is never ready, nor one whose state may rest on a backup restore whose
// commit it has not seen (the leader that made it, or a follower it reached
// as a snapshot; backup.go).
func (n *Node) Ready() bool {
	if _, bad := n.Diverged(); bad {
		return false
	}
	if n.restoreUnconfirmed() {
		return false // a backup restore the cluster may never have committed (backup.go)
	}
	if id, _ := n.Leader(); id == "" {
		return false
	}
	if !n.AppliedThrough(n.startIndex) {
		return false
	}
	if n.IsLeader() {
		return n.readyTerm.Load() == n.raft.CurrentTerm()
	}
	commit := n.raft.CommitIndex()
	applied := n.raft.AppliedIndex()
	lag := n.cfg.ReadyMaxLag
	return commit > 0 && commit <= applied+lag && n.transport.leaderCommit.Load() <= applied+lag
}

// Read returns a read-only view of the locks. Unless stale, it is
// linearizable: this node must lead, confirm it still does with a quorum,
// and have applied everything committed before the read began. The view is
// not the machine itself, so that no reader can apply or restore outside
// Raft (not even by a type assertion).
func (n *Node) Read(ctx context.Context, stale bool) (nodeapi.LockReader, error) {
	if _, bad := n.Diverged(); bad {
		return nil, ErrDiverged // its state is not the cluster's, stale or not
	}
	if n.restoreUnconfirmed() {
		return nil, ErrDiverged // nor known to be: a restore not seen committed (backup.go)
	}
	if stale {
		if n.IsLeader() {
			return leaderReader{lockReader{n.machine}, n}, nil
		}
		return lockReader{n.machine}, nil
	}
	if !n.IsLeader() {
		return nil, ErrNotLeader
	}
	if n.readyTerm.Load() != n.raft.CurrentTerm() {
		return nil, ErrNoLeader // a new leader before its Barrier may miss committed entries
	}
	commit := n.raft.CommitIndex()
	if err := n.raft.VerifyLeader().Error(); err != nil {
		return nil, raftError("verify leader", err)
	}
	if err := n.waitApplied(ctx, commit); err != nil {
		return nil, err
	}
	return leaderReader{lockReader{n.machine}, n}, nil
}

// lockReader is the read-only part of the machine.
type lockReader struct{ m *fsm.Machine }

func (r lockReader) Get(name string) (fsm.Lock, bool) { return r.m.Get(name) }
func (r lockReader) List(prefix string, limit int) ([]fsm.Lock, bool) {
	return r.m.List(prefix, limit)
}
func (r lockReader) Index(name string) uint64         { return r.m.Index(name) }
func (r lockReader) PrefixIndex(prefix string) uint64 { return r.m.PrefixIndex(prefix) }
func (r lockReader) Lookup(name string) (fsm.Lock, bool, uint64) {
	return r.m.Lookup(name)
}
func (r lockReader) ListIndexed(prefix string, limit int) ([]fsm.Lock, bool, uint64) {
	return r.m.ListIndexed(prefix, limit)
}

func (r lockReader) Holders(name string) []fsm.Lock { return r.m.Holders(name) }
func (r lockReader) LookupHolders(name string) ([]fsm.Lock, uint64) {
	return r.m.LookupHolders(name)
}
func (r lockReader) Session(id string) (fsm.Session, bool) {
	return r.m.Session(id)
}
func (r lockReader) Semaphore(name string) (fsm.Semaphore, bool) {
	return r.m.Semaphore(name)
}

// leaderReader is a leader's view: it also says a lock's time left and
// its parked acquires (nodeapi.LeaseView).
type leaderReader struct {
	lockReader
	n *Node
}

func (r leaderReader) Remaining(l fsm.Lock) (time.Duration, bool) {
	n := r.n
	if !n.IsLeader() {
		return 0, false
	}
	c := n.machine.Clock()
	if c.Term != n.raft.CurrentTerm() {
		return 0, false // no stamp of this term: the base is not this leader's clock
	}
	// The FSM clock now, had an entry been stamped at this instant (as in
	// untilNextTick).
	projected := c.Now + (n.clock.Now() - c.Stamp)
	return time.Duration(max(l.Deadline-projected, 0)), true
}

func (r leaderReader) Waiters(name string) int { return r.n.waiters.parked(name) }

// SemaphoreWaiters is how many semaphore acquires wait for name.
func (r leaderReader) SemaphoreWaiters(name string) int {
	return r.n.waiters.queueFor(fsm.OpSemAcquire).parked(name)
}

// parked is how many acquires wait for name.
func (q *waitQueue) parked(name string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if lq := q.locks[name]; lq != nil {
		return len(lq.waiters)
	}
	return 0
}

func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	if n.AppliedThrough(index) {
		return nil
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for !n.AppliedThrough(index) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for index %d to apply: %w", index, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// AppliedThrough reports whether the state machine holds the effect of every
// entry up to index. Raft's AppliedIndex runs ahead of the machine (it counts
// entries handed to the FSM goroutine), so entries between what the machine
// applied and index must be ones that change nothing there (no-ops, barriers)
// or already folded into a snapshot.
func (n *Node) AppliedThrough(index uint64) bool {
	if n.raft.AppliedIndex() < index {
		return false
	}
	last := n.fsm.last.Load()
	if index <= last {
		return true
	}
	if index-last > 1024 {
		return false // a long gap is still being applied; ask again shortly
	}
	snapshot := uint64(0) // read only if needed: Stats is not cheap
	for i := last + 1; i <= index; i++ {
		var l raft.Log
		if err := n.logs.GetLog(i, &l); err != nil {
			continue // compacted: covered by the snapshot the machine restored
		}
		if l.Type != raft.LogCommand && l.Type != raft.LogConfiguration {
			continue
		}
		if snapshot == 0 {
			snapshot, _ = strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
		}
		if i > snapshot {
			return false
		}
	}
	return true
}
