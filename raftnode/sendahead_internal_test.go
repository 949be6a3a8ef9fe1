package raftnode

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

// heldDisk is a log store whose writes wait, once hold is set, until release
// is closed; entered is closed when the first held write begins.
type heldDisk struct {
	raft.LogStore
	hold    *atomic.Bool
	entered chan struct{}
	release chan struct{}
	enter   *sync.Once
}

func (d heldDisk) StoreLogs(ls []*raft.Log) error {
	if d.hold.Load() {
		d.enter.Do(func() { close(d.entered) })
		<-d.release
	}
	return d.LogStore.StoreLogs(ls)
}

func (d heldDisk) StoreLog(l *raft.Log) error { return d.StoreLogs([]*raft.Log{l}) }

// startHeldTrio is startTrioWith with every node's log under a heldDisk,
// returned by node id; configure (may be nil) adjusts each config further.
func startHeldTrio(t *testing.T, base Config, listened func(id, addr string), configure func(id string, cfg *Config)) (*trio, map[string]heldDisk) {
	disks := map[string]heldDisk{}
	tr := startTrioWith(t, base, listened, func(id string, cfg *Config) {
		d := heldDisk{hold: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{}), enter: new(sync.Once)}
		cfg.wrapLogs = func(s raft.LogStore) raft.LogStore { d.LogStore = s; disks[id] = d; return d }
		if configure != nil {
			configure(id, cfg)
		}
	})
	return tr, disks
}

// idleFollowers waits until both followers hold the leader's last entry and,
// with send-ahead, raft's replication has told the leader so and is idle to
// them, so that the next batch goes to both early. It returns that index.
func idleFollowers(t *testing.T, tr *trio, leader *Node) uint64 {
	t.Helper()
	var last uint64
	waitUntil(t, "both followers caught up and idle", func() bool {
		last = leader.raft.LastIndex()
		for id, n := range tr.nodes {
			if n == leader {
				continue
			}
			if n.raft.LastIndex() != last {
				return false
			}
			if leader.ahead != nil {
				if p := leader.ahead.peer(raft.ServerID(id)); p.reach.Load() != last || p.streaming.Load() != 0 {
					return false
				}
			}
		}
		return true
	})
	return last
}

// The followers write a batch while the leader's own write of it is still
// under way, and the write is answered only once the leader's copy is in its
// log too: the leader's disk write overlaps the followers', and a quorum
// still counts the leader only after its write.
func TestSendAheadOverlapsTheLeadersWriteAndStillWaitsForIt(t *testing.T) {
	tr, disks := startHeldTrio(t, Config{StateCheckInterval: -1}, nil, func(id string, cfg *Config) {
		// An early answer stands for LeaderLeaseTimeout: longer than the
		// test holds the leader's write, even on a loaded machine.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	})
	leader := tr.leader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := fsm.Command{Op: fsm.OpAcquire, Name: "warm", LeaseID: "lease-0123456789abcdef", TTL: 60_000}
	if _, err := leader.Apply(ctx, cmd); err != nil {
		t.Fatalf("first write: %v", err)
	}
	last := idleFollowers(t, tr, leader)

	d := disks[leader.ID()]
	d.hold.Store(true)
	answered := make(chan error, 1)
	go func() {
		cmd.Name = "held"
		_, err := leader.Apply(ctx, cmd)
		answered <- err
	}()
	select {
	case <-d.entered:
	case err := <-answered:
		t.Fatalf("the write was answered before the leader wrote it: %v", err)
	}
	waitUntil(t, "both followers to hold the entry the leader is still writing", func() bool {
		for _, n := range tr.nodes {
			if n != leader && n.raft.LastIndex() <= last {
				return false
			}
		}
		return true
	})
	select {
	case err := <-answered:
		t.Fatalf("the write was answered while the leader's own copy was not written: %v", err)
	default:
	}
	close(d.release)
	if err := <-answered; err != nil {
		t.Fatalf("write after the leader's copy: %v", err)
	}
	if used := leader.ahead.used.Load(); used == 0 {
		t.Error("raft's replication sent the batch again instead of taking the early send's answer")
	}
	if refused := leader.ahead.refused.Load(); refused != 0 {
		t.Errorf("%d early sends refused in a healthy cluster", refused)
	}
}

// fakeNet answers AppendEntries with answer and records what was sent.
type fakeNet struct {
	sent   []*raft.AppendEntriesRequest
	answer func(req *raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error)
}

func (f *fakeNet) AppendEntries(_ raft.ServerID, _ raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	f.sent = append(f.sent, req)
	r, err := f.answer(req)
	*resp = r
	return err
}

// tookAll answers every request as a follower that took its entries.
func tookAll(req *raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
	return raft.AppendEntriesResponse{Term: req.Term, LastLog: req.Entries[len(req.Entries)-1].Index, Success: true}, nil
}

// raft's AppendEntries is answered by an early send of its first entries only
// when that carried them after the same previous entry in the same term, the
// follower took them, and the answer is fresh; the entries past the early
// send's then go out after them. Otherwise the request goes out whole.
func TestReplicateTakesOnlyAMatchingFreshSuccessfulEarlySend(t *testing.T) {
	entries := func(first, last, term uint64) []*raft.Log {
		var out []*raft.Log
		for i := first; i <= last; i++ {
			out = append(out, &raft.Log{Index: i, Term: term})
		}
		return out
	}
	const fresh = time.Minute
	early := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 9, PrevLogTerm: 2, Entries: entries(10, 12, 3), LeaderCommitIndex: 8}
	cases := []struct {
		name string
		req  *raft.AppendEntriesRequest
		ok   bool          // the follower took the early send
		err  error         // the early send's transport error
		age  time.Duration // of the early send when raft's request comes
		// what goes out: nothing (0), the rest after index 12 (12), or the
		// request whole (its previous entry)
		sentAfter uint64
	}{
		{"same entries, newer commit", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 9, PrevLogTerm: 2, Entries: entries(10, 12, 3), LeaderCommitIndex: 9}, true, nil, 0, 0},
		{"more entries", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 9, PrevLogTerm: 2, Entries: entries(10, 14, 3), LeaderCommitIndex: 9}, true, nil, 0, 12},
		{"refused early send", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 9, PrevLogTerm: 2, Entries: entries(10, 12, 3)}, false, nil, 0, 9},
		{"early send failed", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 9, PrevLogTerm: 2, Entries: entries(10, 12, 3)}, true, errors.New("connection reset"), 0, 9},
		{"answer too old", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 9, PrevLogTerm: 2, Entries: entries(10, 12, 3)}, true, nil, fresh + time.Second, 9},
		{"fewer entries", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 9, PrevLogTerm: 2, Entries: entries(10, 11, 3)}, true, nil, 0, 9},
		{"earlier start", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 8, PrevLogTerm: 2, Entries: entries(9, 12, 3)}, true, nil, 0, 8},
		{"other previous term", &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 9, PrevLogTerm: 1, Entries: entries(10, 12, 3)}, true, nil, 0, 9},
		{"later term", &raft.AppendEntriesRequest{Term: 4, PrevLogEntry: 9, PrevLogTerm: 2, Entries: entries(10, 12, 4)}, true, nil, 0, 9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			earlyNet := &fakeNet{answer: func(*raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
				return raft.AppendEntriesResponse{Term: 3, LastLog: 12, Success: c.ok}, c.err
			}}
			s := &sendAhead{trans: earlyNet, log: hclog.NewNullLogger(), peers: map[raft.ServerID]*aheadPeer{}, fresh: fresh}
			p := s.peer("f")
			p.reach.Store(early.PrevLogEntry)
			call := p.start(early)
			s.wg.Add(1)
			s.send(p, raft.Server{ID: "f"}, call)
			call.sent = call.sent.Add(-c.age)

			net := &fakeNet{answer: tookAll}
			var resp raft.AppendEntriesResponse
			if err := s.replicate(net, "f", "", c.req, &resp); err != nil {
				t.Fatal(err)
			}
			var sent *raft.AppendEntriesRequest
			if len(net.sent) > 0 {
				sent = net.sent[0]
			}
			last := c.req.Entries[len(c.req.Entries)-1]
			switch {
			case c.sentAfter == 0 && sent != nil:
				t.Fatalf("sent %+v, want the early send's answer", sent)
			case c.sentAfter != 0 && sent == nil:
				t.Fatalf("nothing sent, want the entries after %d", c.sentAfter)
			case sent != nil:
				if sent.PrevLogEntry != c.sentAfter || sent.Entries[0].Index != c.sentAfter+1 || sent.Entries[len(sent.Entries)-1] != last ||
					sent.Term != c.req.Term || sent.LeaderCommitIndex != c.req.LeaderCommitIndex {
					t.Fatalf("sent %+v, want raft's request from after %d", sent, c.sentAfter)
				}
				if c.sentAfter == 12 && sent.PrevLogTerm != 3 {
					t.Fatalf("previous term %d after the early entries, want 3", sent.PrevLogTerm)
				}
			}
			if !resp.Success || (sent == nil && resp.LastLog != call.resp.LastLog) {
				t.Fatalf("answer %+v", resp)
			}
			if p.reach.Load() != last.Index {
				t.Errorf("follower's reach %d after the answer, want %d", p.reach.Load(), last.Index)
			}
			if p.streaming.Load() != 0 {
				t.Errorf("streaming %d after the answer", p.streaming.Load())
			}
		})
	}
}

// raft's replication waits for an early send's answer no longer than the
// answer could stand, then sends its request itself.
func TestReplicateWaitsForAnEarlyAnswerOnlyWhileItCouldStand(t *testing.T) {
	s := &sendAhead{peers: map[raft.ServerID]*aheadPeer{}, fresh: 50 * time.Millisecond}
	p := s.peer("f")
	req := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 9, PrevLogTerm: 2, Entries: []*raft.Log{{Index: 10, Term: 3}}}
	p.reach.Store(9)
	call := p.start(req) // never answers
	net := &fakeNet{answer: tookAll}
	var resp raft.AppendEntriesResponse
	done := make(chan error, 1)
	go func() { done <- s.replicate(net, "f", "", req, &resp) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("raft's request still waits for an early answer %v after its send, past its %v", time.Since(call.sent), s.fresh)
	}
	if len(net.sent) != 1 || net.sent[0] != req {
		t.Fatal("raft's request was not sent after the early answer could no longer stand")
	}
	if since := time.Since(call.sent); since < s.fresh {
		t.Fatalf("gave up on the early answer after %v, before it went stale (%v)", since, s.fresh)
	}
}

// An early send goes to a follower only when its log reaches the entry
// before the batch, raft's replication to it is idle, it took the last early
// send (a refusal stops them until raft's replication succeeds to it again)
// and no other early send to it is in flight.
func TestEarlySendsGoOnlyToAFollowerThatCanTakeThem(t *testing.T) {
	refuse := &fakeNet{answer: func(*raft.AppendEntriesRequest) (raft.AppendEntriesResponse, error) {
		return raft.AppendEntriesResponse{Term: 3, LastLog: 5}, nil // its log is shorter than known
	}}
	s := &sendAhead{trans: refuse, log: hclog.NewNullLogger(), peers: map[raft.ServerID]*aheadPeer{}, fresh: time.Minute}
	p := s.peer("f")
	req := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 9, PrevLogTerm: 2, Entries: []*raft.Log{{Index: 10, Term: 3}}}
	if p.start(req) != nil {
		t.Fatal("early send to a follower whose log is not known to reach the previous entry")
	}
	p.reach.Store(9)
	p.streaming.Store(1)
	if p.start(req) != nil {
		t.Fatal("early send while raft's replication to the follower is under way")
	}
	p.streaming.Store(0)
	first := p.start(req)
	if first == nil {
		t.Fatal("no early send to an idle follower that holds the previous entry")
	}
	next := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 10, PrevLogTerm: 3, Entries: []*raft.Log{{Index: 11, Term: 3}}}
	if p.start(next) != nil {
		t.Fatal("a second early send started while the first is in flight")
	}
	s.wg.Add(1)
	s.send(p, raft.Server{ID: "f"}, first)
	if p.start(next) != nil {
		t.Fatal("early send to a follower that refused the last one")
	}
	var resp raft.AppendEntriesResponse
	catchUp := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 5, PrevLogTerm: 2, Entries: []*raft.Log{{Index: 6, Term: 2}, {Index: 7, Term: 3}, {Index: 8, Term: 3}, {Index: 9, Term: 3}, {Index: 10, Term: 3}}}
	if err := s.replicate(&fakeNet{answer: tookAll}, "f", "", catchUp, &resp); err != nil {
		t.Fatal(err)
	}
	if p.start(next) == nil {
		t.Fatal("no early send once raft's replication caught the follower up")
	}
}

// When the leader's own disk refuses a batch it already sent ahead, the
// followers may still commit it, so the write is answered ErrStorage, an
// unknown outcome, never a plain failure; the client's resend with the same
// lease id on the next leader gets the grant the batch made, if it made one.
func TestALeaderDiskFailureAfterAnEarlySendIsAnUnknownOutcome(t *testing.T) {
	full := map[string]*atomic.Bool{}
	tr := startTrioWith(t, Config{StateCheckInterval: -1}, nil, func(id string, cfg *Config) {
		f := new(atomic.Bool)
		full[id] = f
		cfg.wrapLogs = func(s raft.LogStore) raft.LogStore { return fullDisk{LogStore: s, full: f} }
	})
	leader := tr.leader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := fsm.Command{Op: fsm.OpAcquire, Name: "warm", LeaseID: "lease-0123456789abcdef", TTL: 60_000}
	if _, err := leader.Apply(ctx, cmd); err != nil {
		t.Fatalf("first write: %v", err)
	}
	last := idleFollowers(t, tr, leader)

	full[leader.ID()].Store(true)
	cmd = fsm.Command{Op: fsm.OpAcquire, Name: "k", LeaseID: "lease-aaaaaaaaaaaaaaaa", TTL: 60_000}
	_, err := leader.Apply(ctx, cmd)
	if !errors.Is(err, ErrStorage) {
		t.Fatalf("a write the leader's disk refused after sending it ahead: %v, want ErrStorage (unknown outcome)", err)
	}
	if sent := leader.ahead.sent.Load(); sent == 0 {
		t.Fatal("the batch was not sent ahead; the test proves nothing")
	}
	waitUntil(t, "a follower to hold the batch the leader could not write", func() bool {
		for _, n := range tr.nodes {
			if n != leader && n.raft.LastIndex() > last {
				return true
			}
		}
		return false
	})
	var next *Node
	waitUntil(t, "a new leader", func() bool {
		for _, n := range tr.nodes {
			if n != leader && n.IsLeader() && n.readyTerm.Load() == n.raft.CurrentTerm() {
				next = n
				return true
			}
		}
		return false
	})
	r, err := next.Apply(ctx, cmd)
	if err != nil || r.Status != fsm.StatusOK {
		t.Fatalf("the resend with the same lease id: %+v %v", r, err)
	}
	if r.Lock.Token <= last {
		t.Fatalf("grant at %d, at or below the entries before the refused batch (%d)", r.Lock.Token, last)
	}
	for _, n := range tr.nodes {
		if n == leader {
			continue
		}
		waitUntil(t, n.ID()+" to hold k for the resent lease", func() bool {
			l, ok := n.Machine().Get("k")
			return ok && l.LeaseID == cmd.LeaseID && l.Token == r.Lock.Token
		})
	}
}
