package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

// startSingle runs a one-node cluster for tests of the node's own logic and
// waits until it leads.
func startSingle(t *testing.T, cfg Config) *Node {
	t.Helper()
	nodes, _ := startNodes(t, 1, cfg, nil, nil)
	n := nodes["n1"]
	deadline := time.Now().Add(10 * time.Second)
	for n.readyTerm.Load() == 0 || n.readyTerm.Load() != n.raft.CurrentTerm() {
		if time.Now().After(deadline) {
			t.Fatal("the single node never led")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return n
}

type manualClock struct{ now atomic.Int64 }

func (c *manualClock) Now() int64                             { return c.now.Load() }
func (c *manualClock) After(d time.Duration) <-chan time.Time { return make(chan time.Time) }

func TestWritesBeyondTheBoundAreShedButTicksAreNot(t *testing.T) {
	clock := &manualClock{}
	n := startSingle(t, Config{MaxPendingApplies: 2, Clock: clock})
	ctx := context.Background()
	acquire := fsm.Command{Op: fsm.OpAcquire, Name: "a", LeaseID: "lease-0123456789abcdef", TTL: 1000}
	if r, err := n.Apply(ctx, acquire); err != nil || r.Status != fsm.StatusOK {
		t.Fatalf("acquire with room: %v %v", r.Status, err)
	}

	// Two writes in flight fill the bound; the next is refused at once.
	n.pending <- struct{}{}
	n.pending <- struct{}{}
	for _, cmd := range []fsm.Command{
		{Op: fsm.OpAcquire, Name: "b", LeaseID: "lease-0123456789abcdef", TTL: 1000},
		{Op: fsm.OpRenew, Name: "a", LeaseID: acquire.LeaseID},
		{Op: fsm.OpRelease, Name: "a", LeaseID: acquire.LeaseID},
	} {
		if _, err := n.Apply(ctx, cmd); !errors.Is(err, ErrOverloaded) {
			t.Fatalf("%v beyond the bound: err %v, want ErrOverloaded", cmd.Op, err)
		}
	}
	if _, ok := n.machine.Get("b"); ok {
		t.Fatal("a shed write changed the state")
	}

	// The leader's ticks still go through: the lease expires on time.
	clock.now.Add(int64(time.Second))
	if _, err := n.apply(fsm.Command{Op: fsm.OpTick}); err != nil {
		t.Fatalf("tick while writes are shed: %v", err)
	}
	if _, ok := n.machine.Get("a"); ok {
		t.Fatal("lease outlived its TTL while writes were shed")
	}

	<-n.pending
	if r, err := n.Apply(ctx, fsm.Command{Op: fsm.OpAcquire, Name: "b", LeaseID: "lease-0123456789abcdef", TTL: 1000}); err != nil || r.Status != fsm.StatusOK {
		t.Fatalf("acquire once room is back: %v %v", r.Status, err)
	}
}

// Regression (found by reading, during the checker work): Barrier fails at
// once while a leadership transfer is in progress. A new leader used to give
// up its leader loop on that, serving no linearizable reads and expiring no
// leases for the rest of its term if the transfer then timed out.
func TestLeaderRetriesBarrierRefusedDuringTransfer(t *testing.T) {
	var calls atomic.Int32
	clock := &manualClock{}
	n := startSingle(t, Config{Clock: clock, barrier: func() error {
		if calls.Add(1) <= 3 {
			return raft.ErrLeadershipTransferInProgress
		}
		return nil
	}})
	if calls.Load() < 4 {
		t.Fatalf("barrier called %d times", calls.Load())
	}
	ctx := context.Background()
	if _, err := n.Read(ctx, false); err != nil {
		t.Fatalf("linearizable read after the retried barrier: %v", err)
	}
	lease := fsm.Command{Op: fsm.OpAcquire, Name: "a", LeaseID: "lease-0123456789abcdef", TTL: 1000}
	if r, err := n.Apply(ctx, lease); err != nil || r.Status != fsm.StatusOK {
		t.Fatalf("acquire: %v %v", r.Status, err)
	}
	clock.now.Add(int64(time.Second))
	n.changed <- struct{}{} // wake the leader loop: the manual clock has no timers
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := n.machine.Get("a"); !ok {
			return // the leader loop ticked and the lease expired
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader loop never expired the lease")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Moving the wall clock changes nothing: the only time Apply sees is the
// leader's monotonic stamp in the command. Raft's own wall-clock field
// (Log.AppendedAt, "never rely on it for coordination") is ignored, so two
// replicas whose wall clocks disagree by days expire leases at the same
// entries and end in the same state.
func TestWallClockDoesNotReachTheStateMachine(t *testing.T) {
	a, b := &raftFSM{m: fsm.New()}, &raftFSM{m: fsm.New()}
	now := time.Now()
	cmds := []fsm.Command{
		{Op: fsm.OpAcquire, Stamp: 0, Name: "a", LeaseID: "lease-0123456789abcdef", TTL: 1000},
		{Op: fsm.OpTick, Stamp: int64(999 * time.Millisecond)},
		{Op: fsm.OpTick, Stamp: int64(1000 * time.Millisecond)},
		{Op: fsm.OpAcquire, Stamp: int64(1500 * time.Millisecond), Name: "a", LeaseID: "lease-fedcba9876543210", TTL: 1000},
	}
	for i, c := range cmds {
		data := c.Encode(nil)
		ra := a.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: now})
		rb := b.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: now.Add(-72 * time.Hour)})
		if fmt.Sprint(ra) != fmt.Sprint(rb) {
			t.Fatalf("entry %d: %v vs %v", i+1, ra, rb)
		}
	}
	var sa, sb bytes.Buffer
	a.m.Snapshot().WriteTo(&sa)
	b.m.Snapshot().WriteTo(&sb)
	if !bytes.Equal(sa.Bytes(), sb.Bytes()) {
		t.Fatal("replicas with different wall clocks diverged")
	}
	if l, ok := a.m.Get("a"); !ok || l.LeaseID != "lease-fedcba9876543210" {
		t.Fatalf("the first lease should have expired at 1000 ms and the second taken the lock: %+v", l)
	}
}
