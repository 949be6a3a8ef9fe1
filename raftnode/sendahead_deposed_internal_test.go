package raftnode

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

// cutLinks cuts a node's Raft links one direction at a time: dials from
// a node (out) or to it (in) are refused, and closing drops its open links.
type cutLinks struct {
	mu      sync.Mutex
	ids     map[string]string // raft addr -> id
	blockIn map[string]bool   // dials to id refused
	blockOu map[string]bool   // dials from id refused
	conns   map[string][]net.Conn
}

func (l *cutLinks) dialer(from string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		l.mu.Lock()
		to := l.ids[addr]
		if l.blockOu[from] || l.blockIn[to] {
			l.mu.Unlock()
			return nil, errors.New("link cut")
		}
		l.mu.Unlock()
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.blockOu[from] || l.blockIn[to] {
			c.Close()
			return nil, errors.New("link cut")
		}
		l.conns[from] = append(l.conns[from], c)
		l.conns[to] = append(l.conns[to], c)
		return c, nil
	}
}

func (l *cutLinks) isolate(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blockIn[id], l.blockOu[id] = true, true
	for _, c := range l.conns[id] {
		c.Close()
	}
	l.conns[id] = nil
}

// openOutbound lets id dial the others again; they still cannot dial it.
func (l *cutLinks) openOutbound(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blockOu[id] = false
}

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
// down: the reads fail. The two waits below (for L's heartbeats to get
// answers, for the reads to queue) only widen the window the test provokes;
// no outcome it accepts depends on them. CommitTimeout is raised so that
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
	l := &cutLinks{ids: map[string]string{}, blockIn: map[string]bool{}, blockOu: map[string]bool{}, conns: map[string][]net.Conn{}}
	disks := map[string]heldDisk{}
	base := Config{StateCheckInterval: -1, CommitTimeout: 30 * time.Second, TickInterval: time.Hour, NoSendAhead: noAhead}
	tr := startTrioWith(t, base, func(id, addr string) { l.ids[addr] = id }, func(id string, cfg *Config) {
		cfg.RaftDial = l.dialer(id)
		d := heldDisk{hold: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{}), once: new(atomic.Bool)}
		disks[id] = d
		cfg.wrapLogs = func(s raft.LogStore) raft.LogStore { d.LogStore = s; disks[id] = d; return d }
	})
	leader := tr.leader()
	ctx := testContext(t)
	cmd := fsm.Command{Op: fsm.OpAcquire, Name: "warm", LeaseID: "lease-0123456789abcdef", TTL: 60_000}
	if _, err := leader.Apply(ctx, cmd); err != nil {
		t.Fatalf("first write: %v", err)
	}
	var last uint64
	waitUntil(t, "both followers caught up and idle", func() bool {
		last = leader.raft.LastIndex()
		for _, n := range tr.nodes {
			if n == leader {
				continue
			}
			if n.raft.LastIndex() != last {
				return false
			}
			if leader.ahead != nil {
				p := leader.ahead.peer(raft.ServerID(n.ID()))
				if p.reach.Load() != last || p.streaming.Load() != 0 {
					return false
				}
			}
		}
		return true
	})

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
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := nl.Apply(wctx, fsm.Command{Op: fsm.OpAcquire, Name: "k", LeaseID: "lease-bbbbbbbbbbbbbbbb", TTL: 60_000})
	if err != nil || r.Status != fsm.StatusOK {
		t.Fatalf("W2 on the new leader: %+v %v", r, err)
	}
	if !leader.IsLeader() {
		t.Fatalf("old leader already stepped down")
	}

	// 3. L's outbound links back; its heartbeats get answers again.
	l.openOutbound(leader.ID())
	time.Sleep(300 * time.Millisecond)

	// 4. Linearizable reads of "k" on L, all begun after W2 was answered.
	type result struct {
		held bool
		err  error
	}
	const reads = 40
	results := make(chan result, reads)
	for i := 0; i < reads; i++ {
		go func() {
			rd, err := leader.Read(ctx, false)
			if err != nil {
				results <- result{err: err}
				return
			}
			_, held := rd.Get("k")
			results <- result{held: held}
		}()
	}
	time.Sleep(100 * time.Millisecond) // all queued in raft's verifyCh

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
