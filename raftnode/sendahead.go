package raftnode

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// sendAhead overlaps a leader's disk write of a batch with its followers'.
// hashicorp/raft (v1.7.3, dispatchLogs) stores a batch in the leader's log,
// fdatasync included, and only then wakes the replication goroutines, so
// every write waits for two fdatasyncs in series: the leader's, then a
// follower's inside the AppendEntries round trip. Raft allows the leader to
// write in parallel with replicating (Ongaro's dissertation, 10.2.1): what
// makes an entry committed is a quorum of durable copies, and hashicorp/raft
// still counts the leader's own copy only once its StoreLogs has returned,
// which this does not change.
//
// StoreLogs on the leader first sends the batch to each voter whose
// replication is idle (no AppendEntries with entries in flight to it) and
// whose log is known to reach the entry before the batch, as the
// AppendEntries raft's replication would send next: the leader's term, that
// previous entry, the batch, and the leader's commit index. It then stores
// the batch itself. When raft's replication, after the leader's write, sends
// an AppendEntries after the same previous entry whose first entries are the
// batch (same indexes and terms, so by Raft's log matching the same entries),
// the transport (watchedTransport.AppendEntries) takes the follower's answer
// to the early send for them: a success means the follower holds them, after
// its own fdatasync, as an answer to raft's request would. If raft's request
// carries only the batch, that answer is its answer and nothing more is
// sent; if it carries more, only the rest goes out, after the batch. A
// refused, failed or late early send answers nothing: raft's request goes out
// whole, and that follower gets no early send until raft's replication to it
// succeeds again.
//
// Raft takes a success as the follower's word that this node still leads:
// it stamps the follower's last contact (the leader steps down when a
// quorum's is older than LeaderLeaseTimeout) and counts it for VerifyLeader,
// on which linearizable reads rest (reads.go). An early answer is therefore
// used only while younger than LeaderLeaseTimeout counted from when its
// request left, no older than the heartbeat a follower honours: a follower
// votes for no other candidate until HeartbeatTimeout (at least
// LeaderLeaseTimeout) after it last heard from its leader. Early sends run on
// a transport of their own whose RPC timeout is that bound, so one never
// outlives its use by more.
type sendAhead struct {
	raft.LogStore // the leader's log as raft sees it, below this

	trans appender      // outbound only (newEarlyTransport), timeout fresh
	fresh time.Duration // LeaderLeaseTimeout: how long an early answer may stand
	log   hclog.Logger
	self  raft.ServerID
	// raft is set once NewRaft returns; until then nothing is sent.
	raft atomic.Pointer[raft.Raft]
	// header is the leader's RPC header, as raft's replication sets it.
	header raft.RPCHeader

	mu    sync.Mutex
	peers map[raft.ServerID]*aheadPeer
	wg    sync.WaitGroup // early sends in flight

	sent, used, refused atomic.Uint64 // early sends; answers raft took; sends refused, failed or late
}

// aheadPeer is one follower's state for sendAhead.
type aheadPeer struct {
	streaming atomic.Int32 // raft's AppendEntries with entries in flight to it
	// reach is the last index its log holds, as raft's last success (or an
	// early send under way) tells; 0, unknown, after an early send failed,
	// until raft's replication succeeds again.
	reach atomic.Uint64

	mu      sync.Mutex
	pending *aheadCall // the latest early send, until raft's replication claims it
}

// aheadCall is one early AppendEntries and, once done is closed, its answer.
type aheadCall struct {
	req  *raft.AppendEntriesRequest
	sent time.Time // when req left: its answer stands for fresh after that
	done chan struct{}
	resp raft.AppendEntriesResponse
	err  error
}

// newSendAhead wraps logs; header is the leader's RPC header (raft's
// transport's address), out the transport early sends go by.
func newSendAhead(logs raft.LogStore, out *raft.NetworkTransport, header raft.RPCHeader, fresh time.Duration, log hclog.Logger) *sendAhead {
	return &sendAhead{
		LogStore: logs,
		trans:    out,
		fresh:    fresh,
		log:      log,
		self:     raft.ServerID(header.ID),
		header:   header,
		peers:    map[raft.ServerID]*aheadPeer{},
	}
}

// close waits for the early sends in flight (each bounded by fresh) and
// closes their transport.
func (s *sendAhead) close() {
	s.wg.Wait()
	if t, ok := s.trans.(*raft.NetworkTransport); ok {
		t.CloseStreams()
		t.Close()
	}
}

func (s *sendAhead) peer(id raft.ServerID) *aheadPeer {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peers[id]
	if p == nil {
		p = &aheadPeer{}
		s.peers[id] = p
	}
	return p
}

// StoreLogs sends the batch ahead when this node leads, then stores it.
func (s *sendAhead) StoreLogs(logs []*raft.Log) error {
	s.sendEarly(logs)
	return s.LogStore.StoreLogs(logs)
}

func (s *sendAhead) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// sendEarly starts the early AppendEntries for logs, if any is due. Raft
// calls StoreLogs from its main goroutine only: as leader from dispatchLogs
// (a new batch of the current term after its last entry), as follower from
// appendEntries (after it has left the leader state), so the state read here
// tells which.
func (s *sendAhead) sendEarly(logs []*raft.Log) {
	r := s.raft.Load()
	if r == nil || len(logs) == 0 || r.State() != raft.Leader {
		return
	}
	term, first := logs[0].Term, logs[0].Index
	if term != r.CurrentTerm() || first < 2 {
		return
	}
	for i, l := range logs {
		if l.Term != term || l.Index != first+uint64(i) {
			return
		}
	}
	var prev raft.Log
	if err := s.LogStore.GetLog(first-1, &prev); err != nil {
		return // below a snapshot: raft's replication sends that
	}
	req := &raft.AppendEntriesRequest{
		RPCHeader:         s.header,
		Term:              term,
		Leader:            s.header.Addr,
		PrevLogEntry:      prev.Index,
		PrevLogTerm:       prev.Term,
		Entries:           logs,
		LeaderCommitIndex: r.CommitIndex(),
	}
	started := false
	for _, srv := range r.GetConfiguration().Configuration().Servers {
		if srv.ID == s.self || srv.Suffrage != raft.Voter {
			continue
		}
		p := s.peer(srv.ID)
		call := p.start(req)
		if call == nil {
			continue
		}
		s.sent.Add(1)
		s.wg.Add(1)
		go s.send(p, srv, call)
		started = true
	}
	if started {
		// Let the sends write their requests before this goroutine blocks
		// in the leader's own fdatasync: left queued behind it, a send
		// waits for another thread to wake and take it.
		runtime.Gosched()
	}
}

// start records an early send of req to p if p is due one: raft's
// replication to it is idle, no early send to it is in flight, and its log
// is known to reach the entry just before req's (raft's replication may not
// have sent it an earlier batch yet, and after a failed early send nothing
// is known until raft's replication succeeds).
func (p *aheadPeer) start(req *raft.AppendEntriesRequest) *aheadCall {
	if p.streaming.Load() > 0 || p.reach.Load() != req.PrevLogEntry {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.pending; c != nil {
		select {
		case <-c.done:
		default:
			return nil
		}
	}
	p.pending = &aheadCall{req: req, sent: time.Now(), done: make(chan struct{})}
	p.reach.Store(req.Entries[len(req.Entries)-1].Index)
	return p.pending
}

func (s *sendAhead) send(p *aheadPeer, srv raft.Server, call *aheadCall) {
	defer s.wg.Done()
	defer close(call.done)
	call.err = s.trans.AppendEntries(srv.ID, srv.Address, call.req, &call.resp)
	if call.err == nil && call.resp.Success {
		return
	}
	p.reach.Store(0) // its log is not known to reach the batch
	if call.err != nil {
		s.log.Debug("early append failed", "peer", srv.ID, "error", call.err)
	}
}

// claim takes p's early send if req appends the same entries after the same
// previous entry in the same term, and perhaps more after them.
func (p *aheadPeer) claim(req *raft.AppendEntriesRequest) *aheadCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.pending
	if c == nil || !startsWith(req, c.req) {
		return nil
	}
	p.pending = nil
	return c
}

// startsWith reports whether req appends, after the same previous entry in
// the same term, first the entries early carries. Entries of one index and
// term are one entry (Raft's log matching), so the last one's suffices.
func startsWith(req, early *raft.AppendEntriesRequest) bool {
	n := len(early.Entries)
	if req.Term != early.Term || req.PrevLogEntry != early.PrevLogEntry || req.PrevLogTerm != early.PrevLogTerm ||
		n == 0 || len(req.Entries) < n {
		return false
	}
	a, b := req.Entries[n-1], early.Entries[n-1]
	return a.Index == b.Index && a.Term == b.Term
}

// appender sends one AppendEntries: raft's network transport.
type appender interface {
	AppendEntries(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error
}

// replicate runs raft's AppendEntries req to a follower: answered by the
// early send of its first entries when that succeeded and is fresh, with the
// rest (if any) sent by net after them; else by sending req whole. While it
// runs no early send goes to that follower, so early sends never race
// raft's own.
func (s *sendAhead) replicate(net appender, id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	p := s.peer(id)
	p.streaming.Add(1)
	defer p.streaming.Add(-1)
	out := req
	if c := p.claim(req); c != nil {
		switch {
		case !c.wait(s.fresh):
			s.refused.Add(1) // no answer in time: raft's request goes out whole
		case c.err != nil || !c.resp.Success:
			s.refused.Add(1)
		case len(req.Entries) == len(c.req.Entries):
			*resp = c.resp
			s.used.Add(1)
			p.reach.Store(req.Entries[len(req.Entries)-1].Index)
			return nil
		default:
			// The follower holds the early entries: send only the rest.
			s.used.Add(1)
			last := c.req.Entries[len(c.req.Entries)-1]
			rest := *req
			rest.PrevLogEntry, rest.PrevLogTerm = last.Index, last.Term
			rest.Entries = req.Entries[len(c.req.Entries):]
			out = &rest
		}
	}
	err := net.AppendEntries(id, target, out, resp)
	if err == nil && resp.Success {
		p.reach.Store(req.Entries[len(req.Entries)-1].Index)
	}
	return err
}

// wait reports whether c answered while its answer may still stand.
func (c *aheadCall) wait(fresh time.Duration) bool {
	left := fresh - time.Since(c.sent)
	if left <= 0 {
		return false
	}
	select {
	case <-c.done:
	default:
		t := time.NewTimer(left)
		defer t.Stop()
		select {
		case <-c.done:
		case <-t.C:
			return false
		}
	}
	return time.Since(c.sent) < fresh
}
