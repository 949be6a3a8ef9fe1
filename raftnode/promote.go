package raftnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// A joined node becomes a voter only once it has caught up, as Consul's
// autopilot does it: each member reports its own progress on its HTTP API,
// and the leader reads those reports through Config.FetchProgress (raftnode
// speaks no HTTP to peers itself, and hashicorp/raft keeps each follower's
// match index private). A join to an address where nothing answers leaves a
// non-voter that never counts towards the quorum, so it cannot wedge the
// cluster; and a change that would leave fewer healthy voters than a quorum
// is refused with ErrUnsafeChange.

// ErrUnsafeChange: a membership change would leave fewer healthy voters than
// a quorum, so the cluster could not elect a leader or commit afterwards.
// It, Progress and ProgressFetcher are declared in internal/nodeapi, so that
// the HTTP layer that serves and fetches progress need not import raftnode.
var ErrUnsafeChange = nodeapi.ErrUnsafeChange

type (
	// Progress is what a member reports of itself.
	Progress = nodeapi.Progress
	// ProgressFetcher asks a member for its own Progress; it must return
	// once ctx ends.
	ProgressFetcher = nodeapi.ProgressFetcher
)

// PromoteMaxLag is how many entries a non-voter may trail the leader's last
// index and still be promoted: close enough to vote and acknowledge at once.
const PromoteMaxLag = 256

// fetchTimeout bounds one progress report; a member slower than this is not
// healthy this time.
func (n *Node) fetchTimeout() time.Duration { return max(2*n.cfg.HeartbeatTimeout, 2*time.Second) }

// report is one member's answer, or why there is none.
type report struct {
	p   Progress
	err error
}

// follows says whether r shows member id following leader in term: it
// answered as itself (not some other node behind a wrong http_addr), and it
// heard this leader's AppendEntries in this term within a heartbeat timeout
// (a follower forgets its leader after that). So its Raft address is right
// and reachable, which an answering HTTP API alone does not show.
func (r report) follows(id raft.ServerID, leader raft.ServerID, term uint64) bool {
	return r.err == nil && r.p.ID == string(id) && r.p.Leader == string(leader) && r.p.Term == term
}

// survey fetches the progress of each of servers, concurrently, each bounded
// by fetchTimeout. A member without a known HTTP address, or with no
// fetcher configured, gets an error report.
func (n *Node) survey(ctx context.Context, servers []raft.Server) map[raft.ServerID]report {
	out := make(map[raft.ServerID]report, len(servers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	set := func(id raft.ServerID, r report) {
		mu.Lock()
		defer mu.Unlock()
		out[id] = r
	}
	for _, s := range servers {
		addr, _ := n.machine.NodeAddr(string(s.ID))
		switch {
		case n.cfg.FetchProgress == nil:
			set(s.ID, report{err: errors.New("no progress fetcher configured")})
			continue
		case addr == "":
			set(s.ID, report{err: fmt.Errorf("no HTTP address known for %s", s.ID)})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fctx, cancel := context.WithTimeout(ctx, n.fetchTimeout())
			defer cancel()
			p, err := n.cfg.FetchProgress(fctx, string(s.ID), addr)
			set(s.ID, report{p, err})
		}()
	}
	wg.Wait()
	return out
}

// quorumCheck says whether voters (a configuration's voters after a change)
// hold a healthy quorum: the leader itself counts as healthy, every other
// voter only if its report shows it following the leader.
func quorumCheck(voters []raft.ServerID, leader raft.ServerID, term uint64, reports map[raft.ServerID]report) (healthy, quorum int, ok bool) {
	for _, v := range voters {
		if v == leader || reports[v].follows(v, leader, term) {
			healthy++
		}
	}
	quorum = len(voters)/2 + 1
	return healthy, quorum, healthy >= quorum
}

func votersOf(servers []raft.Server) []raft.ServerID {
	var out []raft.ServerID
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			out = append(out, s.ID)
		}
	}
	return out
}

func others(servers []raft.Server, self raft.ServerID, keep func(raft.Server) bool) []raft.Server {
	var out []raft.Server
	for _, s := range servers {
		if s.ID != self && keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// checkRemoval refuses removing member id from servers when the voters left
// would not hold a healthy quorum. Removing a non-voter is always safe.
func (n *Node) checkRemoval(ctx context.Context, term uint64, servers []raft.Server, id raft.ServerID) error {
	var left []raft.ServerID
	isVoter := false
	for _, v := range votersOf(servers) {
		if v == id {
			isVoter = true
		} else {
			left = append(left, v)
		}
	}
	if !isVoter {
		return nil
	}
	self := raft.ServerID(n.cfg.ID)
	reports := n.survey(ctx, others(servers, self, func(s raft.Server) bool { return s.Suffrage == raft.Voter && s.ID != id }))
	if healthy, quorum, ok := quorumCheck(left, self, term, reports); !ok {
		return fmt.Errorf("%w: removing %s would leave %d voters of which %d follow this leader, fewer than a quorum of %d (%s)",
			ErrUnsafeChange, id, len(left), healthy, quorum, unhealthy(left, self, term, reports))
	}
	return nil
}

// unhealthy says why each voter that does not count as healthy does not.
func unhealthy(voters []raft.ServerID, leader raft.ServerID, term uint64, reports map[raft.ServerID]report) string {
	var why []string
	for _, v := range voters {
		switch r := reports[v]; {
		case v == leader || r.follows(v, leader, term):
		case r.err != nil:
			why = append(why, fmt.Sprintf("%s: %v", v, r.err))
		default:
			why = append(why, fmt.Sprintf("%s: answers as %q following %q in term %d", v, r.p.ID, r.p.Leader, r.p.Term))
		}
	}
	return strings.Join(why, "; ")
}

// promotable picks the first non-voter whose report shows it following this
// leader with its log within PromoteMaxLag of lastIndex, and whose promotion
// leaves a healthy quorum. reports holds every other member's report.
func promotable(servers []raft.Server, leader raft.ServerID, term, lastIndex uint64, reports map[raft.ServerID]report) (raft.Server, bool) {
	for _, s := range servers {
		r := reports[s.ID]
		if s.Suffrage == raft.Voter || !r.follows(s.ID, leader, term) || r.p.LastIndex+PromoteMaxLag < lastIndex {
			continue
		}
		if _, _, ok := quorumCheck(append(votersOf(servers), s.ID), leader, term, reports); ok {
			return s, true
		}
	}
	return raft.Server{}, false
}

// promoteLoop runs on the leader for one term: as soon as the term's leader
// is ready and then every heartbeat timeout, while there are non-voters, it
// asks the members for their progress and promotes one non-voter that has
// caught up; and until every member reports reading the newest command
// format, it asks to learn which format the leader may write
// (cmdversion.go). Writes that need a newer format wait for the surveys
// (awaitFormat), so the first round runs at once and, while the format is
// held back in the term's first fetchTimeout (followers announce their
// HTTP addresses only once they hear the new leader), rounds repeat every
// formatRetry. It runs on whichever node leads, so a join outlives a
// change of leader.
func (n *Node) promoteLoop(ctx context.Context, ready <-chan struct{}) {
	select {
	case <-ctx.Done():
		return
	case <-ready:
	}
	start := time.Now()
	every := max(n.cfg.HeartbeatTimeout, 50*time.Millisecond)
	for {
		n.promoteRound(ctx)
		wait := every
		if n.CommandVersion() < fsm.MaxCommandVersion && time.Since(start) < n.fetchTimeout() {
			wait = min(wait, formatRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// formatRetry is how soon a new term's leader surveys its members again
// while they hold the command format back.
const formatRetry = 50 * time.Millisecond

func (n *Node) promoteRound(ctx context.Context) {
	term := n.raft.CurrentTerm()
	if !n.IsLeader() || n.readyTerm.Load() != term {
		return // not ready yet (or no longer leading: ctx ends soon)
	}
	n.configMu.Lock() // the survey decides a change: no other change meanwhile
	defer n.configMu.Unlock()
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	servers := f.Configuration().Servers
	self := raft.ServerID(n.cfg.ID)
	promote := len(others(servers, self, func(s raft.Server) bool { return s.Suffrage != raft.Voter })) > 0
	format := n.needFormatSurvey(term, configKey(servers))
	if !promote && !format {
		return
	}
	members := others(servers, self, func(raft.Server) bool { return true })
	reports := n.survey(ctx, members)
	if ctx.Err() != nil {
		return // leadership ended during the survey; a failed fetch says nothing
	}
	// The same survey tells which command formats every member reads.
	n.recordFormat(term, configKey(servers), members, reports)
	if !promote {
		return
	}
	s, ok := promotable(servers, self, term, n.raft.LastIndex(), reports)
	if !ok || ctx.Err() != nil {
		return
	}
	n.log.Info("promoting non-voter to voter", "id", s.ID, "raft_addr", s.Address, "last_index", reports[s.ID].p.LastIndex)
	if err := n.raft.AddVoter(s.ID, s.Address, 0, n.cfg.ApplyTimeout).Error(); err != nil {
		n.log.Warn("promotion failed", "id", s.ID, "error", err)
	}
}
