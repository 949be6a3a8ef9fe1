package raftnode

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

// applyPanic applies l through a fresh adapter and returns the panic
// message, "" when it applied.
func applyPanic(f *raftFSM, l *raft.Log) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f.Apply(l)
	return ""
}

// A command from a newer version stops the node with the index and what to
// do, instead of being answered "invalid" here and applied elsewhere.
func TestAdapterStopsOnUnknownOp(t *testing.T) {
	// An op no version knows yet, and a force release (op 7) in a version 2
	// command, which only exists from version 3 (as a build reading up to 2
	// sees any version 3 entry, whatever its op: refused).
	force := (&fsm.Command{Version: 3, Op: fsm.OpForceRelease, Name: "a"}).Encode(nil)
	force[0] = 2
	for _, tc := range []struct {
		data []byte
		op   int
	}{
		{(&fsm.Command{Op: fsm.OpSemRelease + 1, Name: "a"}).Encode(nil), 15},
		{force, 7},
	} {
		f := &raftFSM{m: fsm.New()}
		msg := applyPanic(f, &raft.Log{Index: 42, Term: 3, Type: raft.LogCommand, Data: tc.data})
		want := fmt.Sprintf("committed entry 42 has op %d which this version does not know; upgrade this node", tc.op)
		if !strings.Contains(msg, want) {
			t.Fatalf("panic %q, want it to say %q", msg, want)
		}
		if f.last.Load() == 42 || f.m.Clock().Index != 0 {
			t.Fatal("the unknown entry counts as applied")
		}
	}
}
