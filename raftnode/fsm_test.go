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
	f := &raftFSM{m: fsm.New()}
	data := (&fsm.Command{Op: fsm.OpRemoveNode + 1, Name: "a"}).Encode(nil)
	msg := applyPanic(f, &raft.Log{Index: 42, Term: 3, Type: raft.LogCommand, Data: data})
	want := "committed entry 42 has op 7 which this version does not know; upgrade this node"
	if !strings.Contains(msg, want) {
		t.Fatalf("panic %q, want it to say %q", msg, want)
	}
	if f.last.Load() == 42 || f.m.Clock().Index != 0 {
		t.Fatal("the unknown entry counts as applied")
	}
}
