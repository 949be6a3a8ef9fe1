package raftnode

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// watchLeadership starts the leader loop when this node wins an election and
// stops it when leadership ends. NotifyCh is buffered and never drops a
// signal, unlike LeaderCh.
func (n *Node) watchLeadership() {
	defer n.wg.Done()
	var running *leaderRun
	for {
		select {
		case leader := <-n.notifyCh:
			n.metrics.leaderChanges.Inc()
			running.stop()
			running = nil
			if leader {
				running = n.startLeaderLoop()
			}
		case <-n.stop:
			running.stop()
			return
		}
	}
}

// leaderRun is one term's leader loop.
type leaderRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (n *Node) startLeaderLoop() *leaderRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &leaderRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		ready := make(chan struct{})    // closed once this term's reads see every committed entry
		promoter := make(chan struct{}) // promote.go: formats surveyed, non-voters promoted once caught up
		go func() { defer close(promoter); n.promoteLoop(ctx, ready) }()
		defer func() { cancel(); <-promoter }()
		n.leaderLoop(ctx, ready)
	}()
	return r
}

// stop ends the loop and waits for it; a nil run is already stopped.
func (r *leaderRun) stop() {
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
}

// leaderLoop is the work only a leader does, once per term: make sure every
// earlier entry is applied, publish its own HTTP address, then keep the FSM
// clock moving with tick entries so leases expire on time. It closes ready
// once the term's reads see every committed entry.
func (n *Node) leaderLoop(ctx context.Context, ready chan<- struct{}) {
	term := n.raft.CurrentTerm()
	log := n.log.With("term", term)
	log.Info("leading")
	defer log.Info("no longer leading")

	if !n.barrier(ctx, log) {
		return
	}
	n.readyTerm.Store(term)
	close(ready)
	n.waiters.open()
	defer n.waiters.close(ErrLeaderChanged)
	if addr, _ := n.machine.NodeAddr(n.cfg.ID); n.cfg.AdvertiseHTTP != "" && addr != n.cfg.AdvertiseHTTP {
		if _, err := n.applyOwn(fsm.Command{Op: fsm.OpSetNode, NodeID: n.cfg.ID, NodeAddr: n.cfg.AdvertiseHTTP}); err != nil {
			log.Warn("publishing own address failed", "error", err)
		}
	}
	n.ensureClusterID(log)
	for {
		wait := n.untilNextTick(term)
		if wait <= 0 {
			if _, err := n.applyOwn(fsm.Command{Op: fsm.OpTick}); err != nil {
				log.Warn("tick failed", "error", err)
				if ctx.Err() != nil {
					return
				}
				wait = n.cfg.TickInterval // do not spin while Raft refuses
			} else {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-n.changed:
		case <-n.clock.After(wait):
		}
	}
}

// wakeLeaderLoop asks the leader loop to look at the deadlines again: a
// lease appeared or moved, so it may be asleep until a later deadline (or
// an hour, with none) than the one that now falls due first. It never
// blocks: one pending wake-up is as good as many.
func (n *Node) wakeLeaderLoop() {
	select {
	case n.changed <- struct{}{}:
	default:
	}
}

// barrier waits until every entry of earlier terms is applied here. A
// Barrier refused for a passing reason (a leadership transfer in progress,
// which may yet time out and leave this node leading) is retried: giving up
// would leave a leader that serves no reads and expires no leases for the
// rest of its term. It returns false once leadership is gone.
func (n *Node) barrier(ctx context.Context, log hclog.Logger) bool {
	for {
		var err error
		if n.cfg.barrier != nil {
			err = n.cfg.barrier()
		} else {
			err = awaitFuture(ctx, n.raft.Barrier(n.cfg.ApplyTimeout))
		}
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("barrier failed; retrying while leading", "error", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// awaitFuture waits for f, or until ctx ends. A Barrier future that raft
// dropped while shutting down was seen never to answer (a CI run hung in
// Node.Close, waiting for the leader loop that waited for it); the leader
// loop must end with its term and with the node, whatever raft does.
func awaitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// untilNextTick says how long the leader may wait before the FSM clock must
// move: until the next deadline falls due on this leader's clock, and while
// deadlines exist no longer than TickInterval after the last stamped entry.
// The second bound is what keeps a failover from restarting leases: a new
// leader counts from the last committed stamp, so the FSM clock may lag the
// real one by at most TickInterval plus the leaderless gap. Client writes
// stamp the clock too, so a busy leader writes no extra ticks. No deadlines:
// no ticks at all.
func (n *Node) untilNextTick(term uint64) time.Duration {
	c := n.machine.Clock()
	if c.Term != term {
		return 0 // this term has no stamp yet: set the base at once
	}
	next, ok := n.machine.NextTimer()
	if !ok {
		return time.Hour // woken by n.changed when a lease appears
	}
	now := n.clock.Now()
	// The FSM clock now, had an entry been stamped at this instant.
	projected := c.Now + (now - c.Stamp)
	wait := time.Duration(next - projected)
	if seededTickOnlyWhenDue {
		return min(wait, n.cfg.TickInterval)
	}
	return min(wait, n.cfg.TickInterval-time.Duration(now-c.Stamp))
}
