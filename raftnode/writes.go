package raftnode

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// Apply proposes one lock command (acquire, renew, release or force
// release) and returns the state machine's outcome once the entry is
// committed on a quorum and applied here. Only the leader can; others return
// ErrNotLeader. A force release needs command format 3 on every member, an
// update or a value format 4 (ErrNotSupportedYet until the format gate
// allows it).
func (n *Node) Apply(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	switch cmd.Op {
	case fsm.OpAcquire, fsm.OpRenew, fsm.OpRelease, fsm.OpForceRelease, fsm.OpUpdate:
	default:
		return fsm.Result{}, fmt.Errorf("raftnode: %v is not a lock command", cmd.Op)
	}
	if err := ctx.Err(); err != nil {
		return fsm.Result{}, err
	}
	if !n.IsLeader() {
		return fsm.Result{}, ErrNotLeader
	}
	switch cmd.Op {
	case fsm.OpAcquire:
		return n.Acquire(ctx, cmd, 0)
	case fsm.OpForceRelease:
		return n.forceRelease(cmd)
	case fsm.OpUpdate:
		if err := n.gate(cmd); err != nil {
			return fsm.Result{}, err
		}
	}
	return n.applyAdmitted(cmd)
}

// gate refuses early, with ErrNotSupportedYet, a command the format this
// leader writes now cannot carry (fsm.Fits). applyExt checks again with the
// version the entry is really written in, since the gate may change in
// between (a new term, a new member).
func (n *Node) gate(cmd fsm.Command) error {
	v := n.CommandVersion()
	if fsm.Fits(cmd, v) {
		return nil
	}
	what := "a lock value"
	switch cmd.Op {
	case fsm.OpForceRelease:
		what = "force release"
	case fsm.OpUpdate:
		what = "a value update"
	}
	return fmt.Errorf("%w: %s needs every node at command version %d; upgrade every node to a build that reads it (GET /v1/cluster shows command_version on each), then retry (this leader writes version %d now)", ErrNotSupportedYet, what, fsm.MinVersion(cmd), v)
}

// forceRelease writes a force release if every member reads it. The check
// here answers early; applyExt checks again with the version the entry is
// really written in, since the gate may change in between (a new term, a
// new member).
func (n *Node) forceRelease(cmd fsm.Command) (fsm.Result, error) {
	if err := n.gate(cmd); err != nil {
		return fsm.Result{}, err
	}
	r, err := n.applyAdmitted(cmd)
	if err == nil && r.Status == fsm.StatusOK && len(r.Freed) == 0 && r.Lock.Token != 0 {
		// The lock-delay may end before the lease's deadline did: wake the
		// leader loop to tick at its end rather than up to TickInterval late.
		select {
		case n.changed <- struct{}{}:
		default:
		}
	}
	return r, err
}

// applyAdmitted applies a client's command if the bounded queue in front of
// Raft has room, and sheds it at once with ErrOverloaded otherwise: under
// overload, fast refusals keep the latency of accepted writes bounded where
// queueing would grow it without limit. The leader's own entries (ticks,
// grants to parked waiters) bypass the bound; they must never be shed.
func (n *Node) applyAdmitted(cmd fsm.Command) (fsm.Result, error) {
	select {
	case n.pending <- struct{}{}:
	default:
		return fsm.Result{}, ErrOverloaded
	}
	defer func() { <-n.pending }()
	return n.apply(cmd)
}

// Acquire proposes an acquire. When the lock is held and wait > 0, the
// request parks on this leader and is granted in arrival order as the lock
// frees; after wait it gets the held answer. An acquire that does not wait
// never jumps ahead of parked ones.
func (n *Node) Acquire(ctx context.Context, cmd fsm.Command, wait time.Duration) (fsm.Result, error) {
	if cmd.Op != fsm.OpAcquire {
		return fsm.Result{}, fmt.Errorf("raftnode: %v is not an acquire", cmd.Op)
	}
	if err := ctx.Err(); err != nil {
		return fsm.Result{}, err
	}
	if !n.IsLeader() {
		return fsm.Result{}, ErrNotLeader
	}
	if err := n.gate(cmd); err != nil {
		return fsm.Result{}, err // a value needs format 4: refused before it parks
	}
	if cmd.LeaseID == "" {
		cmd.LeaseID = api.NewLeaseID()
	}
	if held, term, ok := n.heldHere(cmd); ok {
		if err := n.raft.VerifyLeader().Error(); err != nil {
			return fsm.Result{}, raftError("verify leader", err)
		}
		// The state read must be of the term just verified: a node deposed
		// and re-elected meanwhile may hold an answer another leader has
		// since made false. Then let the log decide.
		if n.raft.CurrentTerm() == term && n.readyTerm.Load() == term {
			if wait <= 0 {
				return held, nil
			}
			return n.waiters.wait(ctx, cmd, held, wait)
		}
	}
	r, err := n.applyAdmitted(cmd)
	if err != nil || r.Status != fsm.StatusHeld || wait <= 0 {
		return r, err
	}
	return n.waiters.wait(ctx, cmd, r, wait)
}

// heldHere answers, from this leader's applied state and without a log
// entry, an acquire that can only be refused: someone is parked for the lock,
// or another lease holds it and its deadline has not come on this leader's
// clock (a tick stamped now would not expire it). A refusal changes nothing,
// so like a linearizable read it needs only the caller's confirmation that
// this node still leads (VerifyLeader after the read: a quorum still taking
// this leader means no other leader can have acknowledged anything since).
// Polling clients then cost the leader a heartbeat round instead of a
// replicated, fsynced entry each. It returns the term it read in: the caller
// must find the same term after VerifyLeader.
func (n *Node) heldHere(cmd fsm.Command) (r fsm.Result, term uint64, ok bool) {
	term = n.raft.CurrentTerm()
	if n.readyTerm.Load() != term {
		return fsm.Result{}, term, false
	}
	holder, held := n.machine.Get(cmd.Name)
	if held && holder.LeaseID == cmd.LeaseID {
		return fsm.Result{}, term, false // a retry by the holder: through the log, it refreshes the lease
	}
	if n.waiters.queued(cmd.Name) {
		return fsm.Result{Status: fsm.StatusHeld, Holder: holder}, term, true
	}
	if !held {
		return fsm.Result{}, term, false
	}
	c := n.machine.Clock()
	if c.Term != term || c.Now+(n.clock.Now()-c.Stamp) >= holder.Deadline {
		return fsm.Result{}, term, false // due (or no stamp of ours yet): let the log decide
	}
	return fsm.Result{Status: fsm.StatusHeld, Holder: holder}, term, true
}

// Waiters returns how many acquires are parked on this node.
func (n *Node) Waiters() int { return n.waiters.size() }

// apply stamps cmd with this leader's clock and commits it through Raft,
// with a checksum every replica verifies before applying it (integrity.go).
// A node whose state diverged accepts no writes.
func (n *Node) apply(cmd fsm.Command) (fsm.Result, error) {
	r, _, err := n.applyExt(cmd, extension{})
	return r, err
}
