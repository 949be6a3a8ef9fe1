package raftnode

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// appliedFuture is a raft.ApplyFuture that has applied, with a response.
type appliedFuture struct {
	raft.ApplyFuture
	index    uint64
	response any
}

func (f appliedFuture) Error() error  { return nil }
func (f appliedFuture) Index() uint64 { return f.index }
func (f appliedFuture) Response() any { return f.response }

// await hands back the FSM's result of the entry, and a committed entry
// with no result is an outcome unknown, never a zero Result (StatusOK).
func TestAwaitAnswersOnlyWhatTheFSMSaid(t *testing.T) {
	n := &Node{}
	held := &fsm.Result{Status: fsm.StatusHeld, Holder: fsm.Lock{Name: "a", Token: 7}}
	r, index, err := n.await(appliedFuture{index: 9, response: held}, fsm.OpAcquire, false)
	if err != nil || index != 9 || r.Status != fsm.StatusHeld || r.Holder.Token != 7 {
		t.Fatalf("await = %+v, %d, %v; want the FSM's held answer at index 9", r, index, err)
	}
	for _, response := range []any{nil, (*fsm.Result)(nil), fsm.Result{}} {
		r, _, err := n.await(appliedFuture{index: 9, response: response}, fsm.OpAcquire, false)
		if !errors.Is(err, ErrIndeterminate) {
			t.Errorf("response %#v: await = %+v, %v; want ErrIndeterminate", response, r, err)
		}
	}
}

// ApplyBatch answers each entry of a batch exactly as Apply answers it
// alone on a replica in the same state: a result of its own for each
// command, nil for a configuration entry among them.
func TestApplyBatchAnswersAsApplyOneByOne(t *testing.T) {
	lease := func(id string) string { return "lease-" + id + "-0123456789abcdef" }
	encode := func(c fsm.Command) []byte { return c.Encode(nil) }
	logs := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: encode(fsm.Command{Op: fsm.OpAcquire, Name: "a", LeaseID: lease("x"), TTL: 1000})},
		{Index: 2, Term: 1, Type: raft.LogConfiguration},
		{Index: 3, Term: 1, Type: raft.LogCommand, Data: encode(fsm.Command{Op: fsm.OpAcquire, Name: "a", LeaseID: lease("y"), TTL: 1000})},
		{Index: 4, Term: 1, Type: raft.LogCommand, Data: encode(fsm.Command{Op: fsm.OpRelease, Name: "a", LeaseID: lease("x")})},
	}
	batch, single := &raftFSM{m: fsm.New()}, &raftFSM{m: fsm.New()}
	got := batch.ApplyBatch(logs)
	for i, l := range logs {
		want := single.Apply(l)
		if (got[i] == nil) != (want == nil) {
			t.Fatalf("entry %d: batch answered %#v, alone %#v", l.Index, got[i], want)
		}
		if want == nil {
			continue
		}
		g, w := got[i].(*fsm.Result), want.(*fsm.Result)
		if g.Status != w.Status || g.Lock != w.Lock || g.Holder != w.Holder || len(g.Freed) != len(w.Freed) {
			t.Errorf("entry %d: batch %+v, alone %+v", l.Index, *g, *w)
		}
		for j := range i {
			if got[j] != nil && got[j] == got[i] {
				t.Errorf("entries %d and %d share one result", logs[j].Index, l.Index)
			}
		}
	}
	if r := got[2].(*fsm.Result); r.Status != fsm.StatusHeld || r.Holder.LeaseID != lease("x") {
		t.Errorf("the second acquire: %+v, want held by the first lease", *r)
	}
	if batch.last.Load() != 4 || single.last.Load() != 4 {
		t.Errorf("applied up to %d (batch) and %d (alone), want 4", batch.last.Load(), single.last.Load())
	}
}
