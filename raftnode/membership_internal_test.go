package raftnode

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// Raft.GetConfiguration().Index() is always 0
// in hashicorp/raft v1.7.3, so the "refused if the configuration changed
// since the check" guard of every membership change was no guard, and two
// leaves checked against the same configuration both went through. Four
// voters, one dead: each leave alone leaves 3 voters with 2 healthy (a
// quorum); both together left {leader, dead}: no quorum, for good. Changes
// now run one at a time, so the second is checked against the first's
// result and refused.
func TestConcurrentLeavesKeepAQuorum(t *testing.T) {
	var nodes sync.Map
	var dead atomic.Pointer[string]
	fetch := func(ctx context.Context, id, addr string) (Progress, error) {
		select { // a member a little slow to answer: the two checks overlap
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return Progress{}, ctx.Err()
		}
		if d := dead.Load(); d != nil && *d == id {
			return Progress{}, errors.New("connection refused")
		}
		v, ok := nodes.Load(id)
		if !ok {
			return Progress{}, errors.New("unknown")
		}
		st, err := v.(*Node).Status()
		if err != nil {
			return Progress{}, err
		}
		return Progress{ID: id, Leader: st.Leader, Term: st.Term, LastIndex: st.LastIndex, CommandVersion: fsm.MaxCommandVersion}, nil
	}
	started, _ := startNodes(t, 4, Config{FetchProgress: fetch}, nil, nil)
	var all []*Node
	for id, n := range started {
		nodes.Store(id, n)
		all = append(all, n)
	}
	var leader *Node
	waitUntil(t, "a leader", func() bool {
		for _, n := range all {
			if n.IsLeader() && n.readyTerm.Load() == n.raft.CurrentTerm() {
				leader = n
				return true
			}
		}
		return false
	})
	var followers []*Node
	for _, n := range all {
		if _, err := leader.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: n.ID(), NodeAddr: "http-" + n.ID()}); err != nil {
			t.Fatal(err)
		}
		if n != leader {
			followers = append(followers, n)
		}
	}
	victim := followers[2].ID()
	dead.Store(&victim)
	followers[2].Close()
	a, b := followers[0].ID(), followers[1].ID()

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, id := range []string{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs[i] = leader.Leave(ctx, id)
		}()
	}
	wg.Wait()
	ok, refused := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrUnsafeChange):
			refused++
		default:
			t.Fatalf("leave answered %v; want one success and one ErrUnsafeChange", err)
		}
	}
	if ok != 1 || refused != 1 {
		t.Fatalf("leaves answered %v; want exactly one success and one ErrUnsafeChange", errs)
	}
	f := leader.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Configuration().Servers); n != 3 {
		t.Fatalf("%d members after the leaves, want 3 (leader, one follower, the dead node)", n)
	}
	// The two live voters are a quorum: the cluster still commits.
	if _, err := leader.apply(fsm.Command{Op: fsm.OpTick}); err != nil {
		t.Fatalf("no commit after the leaves: %v", err)
	}
}
