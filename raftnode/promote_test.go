package raftnode

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// The promoter's decision, member by member: only a non-voter that answers
// as itself, following this leader in this term, within PromoteMaxLag of
// the leader's last index, and whose promotion keeps a healthy quorum.
func TestPromotable(t *testing.T) {
	const term, last = 7, 1000
	voter := func(id string) raft.Server { return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id)} }
	nonvoter := func(id string) raft.Server { return raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(id)} }
	ok := func(id string, lastIndex uint64) report {
		return report{p: Progress{ID: id, Leader: "n1", Term: term, LastIndex: lastIndex}}
	}
	servers := []raft.Server{voter("n1"), voter("n2"), voter("n3"), nonvoter("n4")}
	for _, tc := range []struct {
		name string
		n4   report
		n2   report // a voter; n3 always follows
		want bool
	}{
		{"caught up", ok("n4", last), ok("n2", last), true},
		{"just within the lag", ok("n4", last-PromoteMaxLag), ok("n2", last), true},
		{"too far behind", ok("n4", last-PromoteMaxLag-1), ok("n2", last), false},
		{"unreachable", report{err: errors.New("connection refused")}, ok("n2", last), false},
		{"another node behind its http_addr", ok("n2", last), ok("n2", last), false},
		{"follows nobody (wrong raft_addr)", report{p: Progress{ID: "n4", Term: 0}}, ok("n2", last), false},
		{"an older term", report{p: Progress{ID: "n4", Leader: "n1", Term: term - 1, LastIndex: last}}, ok("n2", last), false},
		// n1, n3, n4 of four voters answer: three, a quorum.
		{"one voter down", ok("n4", last), report{err: errors.New("timeout")}, true},
	} {
		reports := map[raft.ServerID]report{"n2": tc.n2, "n3": ok("n3", last), "n4": tc.n4}
		s, got := promotable(servers, "n1", term, last, reports)
		if got != tc.want || got && s.ID != "n4" {
			t.Errorf("%s: promotable %v %v, want %v", tc.name, s.ID, got, tc.want)
		}
	}
	// Two of three voters down: promoting even a caught-up n4 leaves two of
	// four healthy, fewer than a quorum of three.
	down := report{err: errors.New("down")}
	if s, got := promotable(servers, "n1", term, last, map[raft.ServerID]report{"n2": down, "n3": down, "n4": ok("n4", last)}); got {
		t.Errorf("promoted %s with two of three voters down", s.ID)
	}
}

func TestQuorumCheck(t *testing.T) {
	follows := report{p: Progress{ID: "n2", Leader: "n1", Term: 3}}
	reports := map[raft.ServerID]report{"n2": follows, "n3": {err: errors.New("down")}}
	for _, tc := range []struct {
		voters        []raft.ServerID
		healthy, need int
		ok            bool
	}{
		{[]raft.ServerID{"n1", "n2", "n3"}, 2, 2, true},
		{[]raft.ServerID{"n1", "n3"}, 1, 2, false}, // removing n2 while n3 is down
		{[]raft.ServerID{"n1", "n2"}, 2, 2, true},  // removing the dead n3
		{[]raft.ServerID{"n2", "n3"}, 1, 2, false}, // the leader removing itself
	} {
		h, q, ok := quorumCheck(tc.voters, "n1", 3, reports)
		if h != tc.healthy || q != tc.need || ok != tc.ok {
			t.Errorf("voters %v: %d healthy of quorum %d (%v), want %d of %d (%v)", tc.voters, h, q, ok, tc.healthy, tc.need, tc.ok)
		}
	}
}
