package raftnode

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// Apply proposes one command (a lock's acquire, renew, release, force
// release or update; a session's create, renew or close; a semaphore's
// acquire, renew or release) and returns the state machine's outcome once
// the entry is committed on a quorum and applied here. Only the leader can;
// others return ErrNotLeader. A force release needs command format 3 on
// every member, an update or a value format 4, sessions, semaphores and
// shared locks format 5 (ErrNotSupportedYet until the format rule allows
// it). A session create without an id gets a fresh one.
func (n *Node) Apply(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	switch cmd.Op {
	case fsm.OpAcquire, fsm.OpRenew, fsm.OpRelease, fsm.OpForceRelease, fsm.OpUpdate,
		fsm.OpSessionCreate, fsm.OpSessionRenew, fsm.OpSessionClose, fsm.OpSemAcquire, fsm.OpSemRenew, fsm.OpSemRelease:
	default:
		return fsm.Result{}, fmt.Errorf("raftnode: %v is not a client command", cmd.Op)
	}
	if err := ctx.Err(); err != nil {
		return fsm.Result{}, err
	}
	if !n.IsLeader() {
		return fsm.Result{}, ErrNotLeader
	}
	switch cmd.Op {
	case fsm.OpAcquire, fsm.OpSemAcquire:
		return n.Acquire(ctx, cmd, 0)
	case fsm.OpForceRelease:
		return n.forceRelease(ctx, cmd)
	}
	if err := n.requireFormat(ctx, cmd); err != nil {
		return fsm.Result{}, err
	}
	if cmd.Op == fsm.OpSessionCreate && cmd.SessionID == "" {
		cmd.SessionID = api.NewLeaseID()
	}
	seededSessionTTL(&cmd) // session-late (test builds only)
	return n.applyAdmitted(ctx, cmd)
}

// requireFormat refuses early, with ErrNotSupportedYet, a command the format this
// leader writes cannot carry (fsm.Fits), once this term's first survey of
// its members has told it which it may write. applyExt checks again with
// the version the entry is really written in, since the format rule may change in
// between (a new term, a new member).
func (n *Node) requireFormat(ctx context.Context, cmd fsm.Command) error {
	v := n.CommandVersion()
	if fsm.Fits(cmd, v) {
		return nil
	}
	leaveGathering(ctx) // the survey may take a while: the others go on
	if v = n.awaitFormat(ctx, cmd); fsm.Fits(cmd, v) {
		return nil
	}
	what := "a lock value"
	switch {
	case cmd.Op >= fsm.OpSessionCreate && cmd.Op <= fsm.OpSessionClose || cmd.SessionID != "":
		what = "sessions"
	case cmd.Op >= fsm.OpSemAcquire && cmd.Op <= fsm.OpSemRelease || cmd.Limit != 0:
		what = "semaphores"
	case cmd.Mode != fsm.ModeExclusive:
		what = "shared locks"
	case cmd.Op == fsm.OpForceRelease:
		what = "force release"
	case cmd.Op == fsm.OpUpdate:
		what = "a value update"
	}
	return fmt.Errorf("%w: %s needs every node at command version %d; upgrade every node to a build that reads it (GET /v1/cluster shows command_version on each), then retry (this leader writes version %d now)", ErrNotSupportedYet, what, fsm.MinVersion(cmd), v)
}

// forceRelease writes a force release if every member reads it. The check
// here answers early; applyExt checks again with the version the entry is
// really written in, since the format rule may change in between (a new term, a
// new member).
func (n *Node) forceRelease(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	if err := n.requireFormat(ctx, cmd); err != nil {
		return fsm.Result{}, err
	}
	r, err := n.applyAdmitted(ctx, cmd)
	if err == nil && r.Status == fsm.StatusOK && len(r.Freed) == 0 && r.Lock.Token != 0 {
		// The lock-delay may end before the lease's deadline did: wake the
		// leader loop to tick at its end rather than up to TickInterval late.
		n.wakeLeaderLoop()
	}
	return r, err
}

// applyAdmitted applies a client's command if the bounded queue in front of
// Raft has room, and sheds it at once with ErrOverloaded otherwise: under
// overload, fast refusals keep the latency of accepted writes bounded where
// queueing would grow it without limit. The leader's own entries (ticks,
// grants to parked waiters) bypass the bound; they must never be shed.
func (n *Node) applyAdmitted(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	select {
	case n.pending <- struct{}{}:
	default:
		return fsm.Result{}, ErrOverloaded
	}
	defer func() { <-n.pending }()
	f, err := n.offerFor(ctx, cmd)
	if err != nil {
		return fsm.Result{}, err
	}
	r, _, err := n.await(f, cmd.Op, false)
	n.afterWrite(cmd, r, err)
	return r, err
}

// offerFor offers a client's write: with the other calls of its batch
// (gather.go) when ctx serves one, else alone.
func (n *Node) offerFor(ctx context.Context, cmd fsm.Command) (raft.ApplyFuture, error) {
	if c := gathered(ctx); c != nil {
		return c.offer(cmd)
	}
	return n.offer(cmd, extension{})
}

// Acquire proposes an acquire of a lock (any mode) or of a semaphore
// permit. When it is refused (held, full) and wait > 0, the request parks
// on this leader and is granted in arrival order as the lock or a permit
// frees; after wait it gets the last refusal. An acquire that does not wait
// never jumps ahead of parked ones. Locks and semaphores queue apart.
func (n *Node) Acquire(ctx context.Context, cmd fsm.Command, wait time.Duration) (fsm.Result, error) {
	if cmd.Op != fsm.OpAcquire && cmd.Op != fsm.OpSemAcquire {
		return fsm.Result{}, fmt.Errorf("raftnode: %v is not an acquire", cmd.Op)
	}
	if err := ctx.Err(); err != nil {
		return fsm.Result{}, err
	}
	if !n.IsLeader() {
		return fsm.Result{}, ErrNotLeader
	}
	if err := n.requireFormat(ctx, cmd); err != nil {
		return fsm.Result{}, err // refused before it parks
	}
	if cmd.LeaseID == "" {
		cmd.LeaseID = api.NewLeaseID()
	}
	q := n.waiters.queueFor(cmd.Op)
	if refused, term, ok := n.refusedHere(cmd); ok {
		leaveGathering(ctx) // a leadership round: the others go on
		if err := n.raft.VerifyLeader().Error(); err != nil {
			return fsm.Result{}, raftError("verify leader", err)
		}
		// The state read must be of the term just verified: a node deposed
		// and re-elected meanwhile may hold an answer another leader has
		// since made false. Then let the log decide.
		if n.raft.CurrentTerm() == term && n.readyTerm.Load() == term {
			if wait <= 0 {
				return refused, nil
			}
			return q.wait(ctx, cmd, refused, wait)
		}
	}
	r, err := n.applyAdmitted(ctx, cmd)
	if err != nil || r.Status != q.busy || wait <= 0 {
		return r, err
	}
	return q.wait(ctx, cmd, r, wait)
}

// refusedHere answers, from this leader's applied state and without a log
// entry, an acquire that can only be refused: someone is parked for the
// lock or semaphore, or the lock's holders exclude cmd and none of their
// deadlines has come on this leader's clock (a tick stamped now would not
// expire them). A refusal changes nothing, so like a linearizable read it
// needs only the caller's confirmation that this node still leads
// (VerifyLeader after the read: a quorum still taking this leader means no
// other leader can have acknowledged anything since). Polling clients then
// cost the leader a heartbeat round instead of a replicated, fsynced entry
// each. It returns the term it read in: the caller must find the same term
// after VerifyLeader.
func (n *Node) refusedHere(cmd fsm.Command) (r fsm.Result, term uint64, ok bool) {
	term = n.raft.CurrentTerm()
	if n.readyTerm.Load() != term {
		return fsm.Result{}, term, false
	}
	if cmd.SessionID != "" {
		if !n.machine.HasSession(cmd.SessionID) {
			return fsm.Result{}, term, false // the log answers no_session first
		}
	}
	if cmd.Op == fsm.OpSemAcquire {
		sem, held := n.machine.Semaphore(cmd.Name)
		if held && (sem.Limit != cmd.Limit || holdsLease(sem.Holders, cmd.LeaseID)) {
			return fsm.Result{}, term, false // a mismatch or a retry: the log answers
		}
		if q := n.waiters.queueFor(cmd.Op); q.queued(cmd.Name) {
			if !held {
				// A full answer must list its holders, and nobody holds a
				// permit: the queue is about to grant (wake it, should its
				// free event have been missed) and the log answers this one.
				q.freed([]string{cmd.Name})
				return fsm.Result{}, term, false
			}
			return fsm.Result{Status: fsm.StatusFull, Holders: byToken(sem.Holders)}, term, true
		}
		return fsm.Result{}, term, false
	}
	holders := n.machine.Holders(cmd.Name)
	if holdsLease(holders, cmd.LeaseID) {
		return fsm.Result{}, term, false // a retry by the holder: through the log, it refreshes the lease
	}
	if n.waiters.queued(cmd.Name) {
		r = fsm.Result{Status: fsm.StatusHeld}
		r.Holder, r.Holders = lockRefusal(holders)
		return r, term, true
	}
	if lockGrantable(holders, cmd) {
		return fsm.Result{}, term, false
	}
	c := n.machine.Clock()
	if c.Term != term {
		return fsm.Result{}, term, false // no stamp of ours yet: let the log decide
	}
	now := c.Now + (n.clock.Now() - c.Stamp)
	for _, h := range holders {
		if now >= h.Deadline {
			return fsm.Result{}, term, false // due: let the log decide
		}
	}
	r = fsm.Result{Status: fsm.StatusHeld}
	r.Holder, r.Holders = lockRefusal(holders)
	return r, term, true
}

// Waiters returns how many acquires are parked on this node.
func (n *Node) Waiters() int { return n.waiters.size() }

// apply stamps cmd with this leader's clock and commits it through Raft,
// with a checksum every replica verifies before applying it (integrity.go).
// A node whose state diverged accepts no writes.
func (n *Node) apply(cmd fsm.Command) (fsm.Result, error) {
	r, _, err := n.applyExt(cmd, extension{})
	n.afterWrite(cmd, r, err)
	return r, err
}

// afterWrite wakes the leader loop after a write that set a new or moved
// deadline: it may be asleep until a later one (or an hour, with no
// timers).
func (n *Node) afterWrite(cmd fsm.Command, r fsm.Result, err error) {
	if err == nil && r.Status == fsm.StatusOK {
		switch cmd.Op {
		case fsm.OpSessionCreate, fsm.OpSessionRenew, fsm.OpSemAcquire, fsm.OpSemRenew, fsm.OpRenew:
			n.wakeLeaderLoop()
		}
	}
}

// applyExt stamps cmd with this leader's clock and commits it through Raft
// with a checksum and the given flags. It returns the entry's index.
func (n *Node) applyExt(cmd fsm.Command, x extension) (fsm.Result, uint64, error) {
	return n.applyExtWait(cmd, x, false)
}

// applyOwn applies one of the leader loop's own entries (a tick, the node's
// address, the cluster id). Close waits for the leader loop, and
// hashicorp/raft never answers a future still in its apply queue when it
// shuts down (the queue is buffered, BatchApplyCh): an entry offered just as
// raft stopped would hold the loop, and Close, for ever. This wait also
// ends when the node stops. (Client writes are waited for by their
// requests, which the HTTP server's shutdown bounds.)
func (n *Node) applyOwn(cmd fsm.Command) (fsm.Result, error) {
	r, _, err := n.applyExtWait(cmd, extension{}, true)
	return r, err
}

func (n *Node) applyExtWait(cmd fsm.Command, x extension, stoppable bool) (fsm.Result, uint64, error) {
	f, err := n.offer(cmd, x)
	if err != nil {
		return fsm.Result{}, 0, err
	}
	return n.await(f, cmd.Op, stoppable)
}

// offer stamps cmd with this leader's clock and hands it to Raft with a
// checksum and the given flags, returning its future.
func (n *Node) offer(cmd fsm.Command, x extension) (raft.ApplyFuture, error) {
	n.appendMu.RLock() // a backup restore must see no entry land while it runs (backup.go)
	defer n.appendMu.RUnlock()
	l, err := n.entry(cmd, x)
	if err != nil {
		return nil, err
	}
	return n.raft.ApplyLog(l, n.cfg.ApplyTimeout), nil
}

// entry stamps cmd with this leader's clock and encodes it, with a checksum
// and the given flags, as the Raft entry to offer.
func (n *Node) entry(cmd fsm.Command, x extension) (raft.Log, error) {
	if _, bad := n.Diverged(); bad {
		return raft.Log{}, ErrDiverged
	}
	// A stamp must be read while this node leads the term its entry is
	// logged in: the FSM bases a new term's clock on the term's first
	// stamp, so a stamp read before a step-down (or while still a
	// candidate) and logged after this node won would count again time the
	// FSM has already counted (an early expiry). Leading in term before the
	// stamp and still in term after it means the stamp was read as term's
	// leader. Format 2 carries term as the stamp's term, so a stall between
	// here and the offer to Raft costs no time either: the FSM counts no
	// stamp of another term (fsm/DESIGN.md, "Stale stamps"). Format 1
	// cannot say; there that stall remains the known limit.
	term := n.raft.CurrentTerm()
	if !n.IsLeader() {
		return raft.Log{}, ErrNotLeader
	}
	cmd.Stamp = n.clock.Now()
	if n.raft.CurrentTerm() != term {
		return raft.Log{}, ErrNotLeader
	}
	cmd.Version, cmd.StampTerm = n.commandVersionIn(term), term
	if !fsm.Fits(cmd, cmd.Version) {
		// Checked here, with the version this entry is written in: an
		// entry its own format cannot carry would stop every replica.
		return raft.Log{}, fmt.Errorf("%w: %v needs command format %d on every member; this leader may write format %d in term %d", ErrNotSupportedYet, cmd.Op, fsm.MinVersion(cmd), cmd.Version, term)
	}
	data := cmd.Encode(nil)
	return raft.Log{Data: data, Extensions: encodeExtension(data, x)}, nil
}

// await waits for an offered entry and returns the state machine's answer
// and the entry's index.
func (n *Node) await(f raft.ApplyFuture, op fsm.Op, stoppable bool) (fsm.Result, uint64, error) {
	var err error
	if stoppable {
		err = n.awaitUnlessStopped(f)
	} else {
		err = f.Error()
	}
	if err != nil {
		return fsm.Result{}, 0, raftError("apply "+op.String(), err)
	}
	// The FSM answers every command entry with its result; an entry that
	// applied without one is a write whose answer nobody knows, never a
	// zero Result, which would read as StatusOK.
	p, ok := f.Response().(*fsm.Result)
	if !ok || p == nil {
		return fsm.Result{}, 0, fmt.Errorf("%w: %v entry %d applied without a result", ErrIndeterminate, op, f.Index())
	}
	return *p, f.Index(), nil
}

// awaitUnlessStopped waits for f, or until the node stops (ErrShutdown).
// A future raft never answers leaves its waiting goroutine behind; the
// node is stopping.
func (n *Node) awaitUnlessStopped(f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-n.stop:
		return raft.ErrRaftShutdown
	}
}
