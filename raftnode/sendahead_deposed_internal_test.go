package raftnode

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

// A deposed leader's linearizable reads must not be confirmed by an early
// answer given before a newer leader existed. raft's replication takes an
// early send's answer after the leader's own disk write, and replicateTo
// then counts it as the follower's vote for every VerifyLeader registered by
// then (updateLastAppended, notifyAll). Without the freshness bound
// (sendahead.go) this goes wrong when (3 voters L, F1, F2):
//  1. L dispatches W1; the early sends reach F1 and F2, which store it and
//     answer success in term T. L's own write of W1 stalls.
//  2. L is cut off; F1 and F2 elect F1 in T+1, and W2 acquires "k" there.
//  3. L's outbound links come back (the others still cannot reach it): its
//     heartbeats get answers again, so it does not step down on its lease.
//  4. Clients read "k" on L; each read's VerifyLeader waits in raft's queue.
//  5. L's disk returns; its replication takes the early answers and counts
//     them as votes: the reads answer "k" free, though W2 holds it.
//
// Without send-ahead, raft sends W1 itself in step 5, learns of T+1 and steps
// down: the reads fail. CommitTimeout is raised so that
// raft's idle replication does not tell L of T+1 in the meantime,
// TickInterval so that no tick write queues behind the held one.
func TestSendAheadLeavesNoStaleReadOnADeposedLeader(t *testing.T) {
	for _, noAhead := range []bool{false, true} {
		name := "send-ahead"
		if noAhead {
			name = "no-send-ahead"
		}
		t.Run(name, func(t *testing.T) {
			stale, ok, failed := runStaleReadScenario(t, noAhead)
			t.Logf("%s: %d stale linearizable reads, %d fresh, %d failed", name, stale, ok, failed)
			if stale > 0 {
				t.Errorf("%d linearizable reads on the deposed leader missed a write acknowledged before they began", stale)
			}
		})
	}
}

func runStaleReadScenario(t *testing.T, noAhead bool) (stale, fresh, failed int) {
	l := newLinks()
	base := Config{StateCheckInterval: -1, CommitTimeout: 30 * time.Second, TickInterval: time.Hour, NoSendAhead: noAhead}
	tr, disks := startHeldTrio(t, base, func(id, addr string) { l.ids[addr] = id }, func(id string, cfg *Config) { cfg.RaftDial = l.dialer(id) })
	leader := tr.leader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := fsm.Command{Op: fsm.OpAcquire, Name: "warm", LeaseID: "lease-0123456789abcdef", TTL: 60_000}
	if _, err := leader.Apply(ctx, cmd); err != nil {
		t.Fatalf("first write: %v", err)
	}
	last := idleFollowers(t, tr, leader)

	// 1. W1 on L; L's own write stalls.
	d := disks[leader.ID()]
	d.hold.Store(true)
	w1 := make(chan error, 1)
	go func() {
		c := cmd
		c.Name = "w1"
		_, err := leader.Apply(ctx, c)
		w1 <- err
	}()
	<-d.entered
	if !noAhead {
		waitUntil(t, "the early sends answered", func() bool {
			for _, n := range tr.nodes {
				if n == leader {
					continue
				}
				if n.raft.LastIndex() <= last {
					return false
				}
				p := leader.ahead.peer(raft.ServerID(n.ID()))
				p.mu.Lock()
				c := p.pending
				p.mu.Unlock()
				if c == nil {
					return false
				}
				select {
				case <-c.done:
				default:
					return false
				}
			}
			return true
		})
	}

	// 2. L cut off; the others elect; W2 acquires "k" there.
	l.isolate(leader.ID())
	var nl *Node
	waitUntil(t, "a new leader among the others", func() bool {
		for _, n := range tr.nodes {
			if n != leader && n.IsLeader() && n.readyTerm.Load() == n.raft.CurrentTerm() {
				nl = n
				return true
			}
		}
		return false
	})
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	r, err := nl.Apply(wctx, fsm.Command{Op: fsm.OpAcquire, Name: "k", LeaseID: "lease-bbbbbbbbbbbbbbbb", TTL: 60_000})
	if err != nil || r.Status != fsm.StatusOK {
		t.Fatalf("W2 on the new leader: %+v %v", r, err)
	}
	if !leader.IsLeader() {
		t.Fatalf("old leader already stepped down")
	}

	// 3. L's outbound links back; its heartbeats get answers again.
	dials := l.dialed(leader.ID())
	l.letOut(leader.ID())
	waitUntil(t, "the deposed leader's heartbeats reaching both others again", func() bool { return l.dialed(leader.ID()) >= dials+2 })

	// 4. Linearizable reads of "k" on L, all begun after W2 was answered.
	type result struct {
		held bool
		err  error
	}
	const reads = 40
	results := make(chan result, reads)
	var started atomic.Int32
	for i := 0; i < reads; i++ {
		go func() {
			started.Add(1)
			rd, err := leader.Read(ctx, false)
			if err != nil {
				results <- result{err: err}
				return
			}
			_, held := rd.Get("k")
			results <- result{held: held}
		}()
	}
	waitUntil(t, "every read begun", func() bool { return started.Load() == reads })

	// 5. L's disk returns.
	close(d.release)
	for i := 0; i < reads; i++ {
		select {
		case res := <-results:
			switch {
			case res.err != nil:
				failed++
			case !res.held:
				stale++
			default:
				fresh++
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("read %d never answered", i)
		}
	}
	<-w1
	return stale, fresh, failed
}
