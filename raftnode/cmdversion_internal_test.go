package raftnode

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// The leader writes the newest format only when every other member answered
// as itself and reads it: one failed fetch, one older build (0: a build
// before the field) or one wrong http_addr holds it on format 1.
func TestFormatFor(t *testing.T) {
	members := []raft.Server{{ID: "n2", Suffrage: raft.Voter}, {ID: "n3", Suffrage: raft.Nonvoter}}
	ok := func(id string, v uint8) report { return report{p: Progress{ID: id, CommandVersion: v}} }
	for _, tc := range []struct {
		name   string
		n2, n3 report
		want   uint8
	}{
		{"all read the newest", ok("n2", fsm.MaxCommandVersion), ok("n3", fsm.MaxCommandVersion), fsm.MaxCommandVersion},
		{"a newer build", ok("n2", fsm.MaxCommandVersion+1), ok("n3", fsm.MaxCommandVersion), fsm.MaxCommandVersion},
		{"a non-voter reads 1", ok("n2", fsm.MaxCommandVersion), ok("n3", 1), 1},
		{"an old build reports nothing", ok("n2", 0), ok("n3", fsm.MaxCommandVersion), 1},
		{"fetch failed", ok("n2", fsm.MaxCommandVersion), report{err: errors.New("refused")}, 1},
		{"another node behind n3's address", ok("n2", fsm.MaxCommandVersion), ok("n2", fsm.MaxCommandVersion), 1},
	} {
		got, why := formatFor(members, map[raft.ServerID]report{"n2": tc.n2, "n3": tc.n3})
		if got != tc.want || (got < fsm.MaxCommandVersion) != (why != "") {
			t.Errorf("%s: format %d (%q), want %d", tc.name, got, why, tc.want)
		}
	}
	if v, _ := formatFor(nil, nil); v != fsm.MaxCommandVersion {
		t.Errorf("a single node writes format %d, want %d", v, fsm.MaxCommandVersion)
	}
	if v, _ := formatFor(members, map[raft.ServerID]report{}); v != 1 {
		t.Errorf("with no reports: format %d, want 1", v)
	}
}
