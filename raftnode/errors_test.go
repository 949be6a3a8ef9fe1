package raftnode

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// raftError says "outcome unknown" exactly when an entry may have reached
// the log, and names what is certain otherwise.
func TestRaftErrorSaysOnlyWhatIsKnown(t *testing.T) {
	cases := []struct {
		op      string
		err     error
		want    error
		unknown bool
	}{
		{"apply acquire", raft.ErrLeadershipLost, ErrIndeterminate, true},
		{"apply release", fmt.Errorf("x: %w", raft.ErrLeadershipLost), ErrIndeterminate, true},
		// A committed entry that raft did not get to apply before shutting
		// down is answered ErrRaftShutdown.
		{"apply release", raft.ErrRaftShutdown, ErrShutdown, true},
		{"add voter n4", raft.ErrRaftShutdown, ErrShutdown, true},
		{"apply acquire", raft.ErrAbortedByRestore, ErrIndeterminate, true},
		{"apply acquire", raft.ErrEnqueueTimeout, ErrOverloaded, false},
		{"apply acquire", raft.ErrNotLeader, ErrNotLeader, false},
		{"apply acquire", raft.ErrLeadershipTransferInProgress, ErrNoLeader, false},
		// Reads write nothing: their failures are never "unknown".
		{"verify leader", raft.ErrLeadershipLost, ErrNoLeader, false},
		{"verify leader", raft.ErrRaftShutdown, ErrShutdown, false},
		{"get configuration", raft.ErrRaftShutdown, ErrShutdown, false},
	}
	for _, tc := range cases {
		got := raftError(tc.op, tc.err)
		if !errors.Is(got, tc.want) {
			t.Errorf("raftError(%q, %v) = %v, want it to match %v", tc.op, tc.err, got, tc.want)
		}
		if errors.Is(got, ErrIndeterminate) != tc.unknown {
			t.Errorf("raftError(%q, %v) = %v: matches ErrIndeterminate %v, want %v", tc.op, tc.err, got, !tc.unknown, tc.unknown)
		}
	}
	if raftError("apply acquire", nil) != nil {
		t.Error("raftError(nil) is not nil")
	}
}
