package raftnode

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// Command formats. A node of an older build stops at the first
// committed entry in a format it cannot read (by design: answering it
// differently from the others would split the state), so a leader writes
// command format 2 or 3 only once every member of the current configuration,
// voters and non-voters, has reported in a survey of this term (promote.go's,
// through Config.FetchProgress, read from GET /v1/cluster) that its build
// reads it. Until then, and in every new term until its first survey, it
// writes format 1, which every build reads. A force release exists only in
// format 3 (fsm.OpInVersion): until the format rule allows 3 the leader refuses it
// with ErrNotSupportedYet (writes.go, integrity.go). See fsm/DESIGN.md,
// "Command versions".
//
// The format rule also allows what the applied state proves already committed
// (fsm.Machine.ProvenCommandVersion): once a format 5 entry is committed, a
// member that cannot read it has stopped there for good, so a leader that
// cannot hear every member (one is down) still writes format 5, and
// sessions are renewed through a minority's outage (DESIGN.md, "The format rule").

// cmdFormat is what a survey found: in term, with the configuration at
// member set configKey, the leader may write version.
type cmdFormat struct {
	term      uint64
	configKey string
	version   uint8
	heardAll  bool // every member answered as itself: the verdict stands
}

// CommandVersion is the command format this node writes now: the surveyed
// version if it leads and has surveyed its members in the current term, else
// 1 (read by every build); at least what its applied state proves the log
// already holds.
func (n *Node) CommandVersion() uint8 {
	return n.commandVersionIn(n.raft.CurrentTerm())
}

func (n *Node) commandVersionIn(term uint64) uint8 {
	v := uint8(1)
	if f := n.cmdFormat.Load(); f != nil && f.term == term {
		v = f.version
	}
	return max(v, n.provenVersion())
}

// provenVersion is the format the applied state proves committed: every
// member that can still apply entries reads it (fsm.ProvenCommandVersion).
func (n *Node) provenVersion() uint8 {
	return min(n.machine.ProvenCommandVersion(), fsm.MaxCommandVersion)
}

// needFormatSurvey says whether the members' formats must be (re)surveyed:
// none yet in this term or for this configuration, or some member did not
// report the highest format last time.
func (n *Node) needFormatSurvey(term uint64, config string) bool {
	f := n.cmdFormat.Load()
	return f == nil || f.term != term || f.configKey != config || f.version < fsm.MaxCommandVersion
}

// formatFor is the highest command format every member in members reads,
// from their reports: a member that did not answer as itself (down, a wrong
// http_addr, no fetcher) holds the cluster on format 1. The leader is not
// in members; it reads what it runs. The second result says who holds the
// format below this build's, for the log.
func formatFor(members []raft.Server, reports map[raft.ServerID]report) (uint8, string) {
	v := uint8(fsm.MaxCommandVersion)
	var why []string
	for _, s := range members {
		r := reports[s.ID]
		switch {
		case r.err != nil:
			v = 1
			why = append(why, fmt.Sprintf("%s: %v", s.ID, r.err))
		case r.p.ID != string(s.ID):
			v = 1
			why = append(why, fmt.Sprintf("%s: answered as %q", s.ID, r.p.ID))
		case r.p.CommandVersion < v:
			v = max(r.p.CommandVersion, 1)
			why = append(why, fmt.Sprintf("%s: reads up to %d", s.ID, r.p.CommandVersion))
		case r.p.CommandVersion < fsm.MaxCommandVersion:
			why = append(why, fmt.Sprintf("%s: reads up to %d", s.ID, r.p.CommandVersion))
		}
	}
	sort.Strings(why)
	return v, strings.Join(why, "; ")
}

// recordFormat publishes the format a survey of term, with the
// configuration configKey, allows, and logs when what this leader
// writes changes.
func (n *Node) recordFormat(term uint64, config string, members []raft.Server, reports map[raft.ServerID]report) {
	surveyed, why := formatFor(members, reports)
	was := n.commandVersionIn(term)
	heardAll := true
	for _, s := range members {
		if r := reports[s.ID]; r.err != nil || r.p.ID != string(s.ID) {
			heardAll = false
		}
	}
	prev := n.cmdFormat.Swap(&cmdFormat{term: term, configKey: config, version: surveyed, heardAll: heardAll})
	n.formatNews.notify()
	v := n.commandVersionIn(term)
	switch {
	case v != was:
		n.log.Info("command format for new log entries changed", "version", v, "was", was, "term", term, "members", len(members)+1, "held_back_by", why)
	case v < fsm.MaxCommandVersion && (prev == nil || prev.term != term):
		n.log.Info("writing an older command format: not every member reads the newest", "version", v, "newest", fsm.MaxCommandVersion, "term", term, "held_back_by", why)
	case surveyed < v && (prev == nil || prev.term != term):
		n.log.Info("writing the format the committed log already holds, though not every member answered for it", "version", v, "surveyed", surveyed, "term", term, "held_back_by", why)
	}
}

// awaitFormat returns the format this leader writes once it fits cmd,
// waiting at most fetchTimeout (one survey's bound) or until ctx ends. A
// new term writes format 1 until a survey of its members allows more; the
// first survey starts as soon as the leader is ready, and while the format
// is held back early in a term (a member's HTTP address not yet announced,
// a member still starting) the surveys repeat quickly (promoteLoop). A
// write that needs a newer format waits for them rather than being refused
// for want of a survey, so a cluster that starts together accepts every
// feature from its first request. Once every member has answered, the
// verdict stands and nothing waits: a member running an older build holds
// the format back at once, one that does not answer after the wait.
func (n *Node) awaitFormat(ctx context.Context, cmd fsm.Command) uint8 {
	term := n.raft.CurrentTerm()
	timer := time.NewTimer(n.fetchTimeout())
	defer timer.Stop()
	for {
		news := n.formatNews.wait()
		v := n.commandVersionIn(term)
		if fsm.Fits(cmd, v) || !n.IsLeader() || n.raft.CurrentTerm() != term {
			return v
		}
		if f := n.cmdFormat.Load(); f != nil && f.term == term && f.heardAll {
			return v
		}
		select {
		case <-news:
		case <-timer.C:
			return n.commandVersionIn(term)
		case <-ctx.Done():
			return n.commandVersionIn(term)
		}
	}
}

// broadcast wakes every goroutine waiting on it: wait returns a channel
// that notify closes.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// forgetFormat drops what the last survey allowed: until the next survey
// hears every member, the leader writes the oldest format.
func (n *Node) forgetFormat() { n.cmdFormat.Store(nil) }

// configKey identifies a configuration by its servers (hashicorp/raft
// v1.7.3's GetConfiguration reports no index), so a survey's verdict holds
// only for the member set it heard.
func configKey(servers []raft.Server) string {
	ids := make([]string, len(servers))
	for i, s := range servers {
		ids[i] = fmt.Sprintf("%s@%s/%v", s.ID, s.Address, s.Suffrage)
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}
