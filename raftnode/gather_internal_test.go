package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// offers records what a gathering hands to Raft: each offerAll as one
// group of lock names, and each entry offered alone.
type offers struct {
	mu     sync.Mutex
	groups [][]string
	alone  []string
	timers []func() // the gatherWait timers started, to fire by hand
}

func (o *offers) gathering(calls int) (*gathering, []context.Context, func(int)) {
	g := &gathering{open: calls,
		offerAll: func(batch []*gatherEntry) {
			o.mu.Lock()
			defer o.mu.Unlock()
			var names []string
			for _, e := range batch {
				names = append(names, e.cmd.Name)
				e.f = doneFuture{index: uint64(len(o.groups)*100 + len(names))}
			}
			o.groups = append(o.groups, names)
		},
		alone: func(cmd fsm.Command) (raft.ApplyFuture, error) {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.alone = append(o.alone, cmd.Name)
			return doneFuture{}, nil
		},
		afterFunc: func(_ time.Duration, f func()) *time.Timer {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.timers = append(o.timers, f)
			return time.NewTimer(time.Hour) // stopped by take; fired only by hand
		},
	}
	ctxs, done := g.calls(context.Background(), calls)
	return g, ctxs, done
}

func (o *offers) snapshot() (groups [][]string, alone []string, timers int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([][]string(nil), o.groups...), append([]string(nil), o.alone...), len(o.timers)
}

// doneFuture is an answered raft.ApplyFuture.
type doneFuture struct{ index uint64 }

func (doneFuture) Error() error    { return nil }
func (f doneFuture) Index() uint64 { return f.index }
func (doneFuture) Response() any   { return fsm.Result{} }

var _ raft.ApplyFuture = doneFuture{}

// join offers a write for the call ctx serves, on a goroutine of its own,
// and returns a channel that yields once the offer returned.
func join(ctx context.Context, name string) <-chan error {
	out := make(chan error, 1)
	go func() {
		_, err := gathered(ctx).offer(fsm.Command{Op: fsm.OpAcquire, Name: name})
		out <- err
	}()
	return out
}

// waitJoined polls until n calls wait in g.
func waitJoined(t *testing.T, g *gathering, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		got := len(g.joined)
		g.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls joined, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// pending fails if anything was offered, or a joined call returned, while
// some call of the gathering is still open.
func pending(t *testing.T, o *offers, chs ...<-chan error) {
	t.Helper()
	if groups, alone, _ := o.snapshot(); len(groups) != 0 || len(alone) != 0 {
		t.Fatalf("offered %v together and %v alone while a call is still open", groups, alone)
	}
	for _, ch := range chs {
		select {
		case err := <-ch:
			t.Fatalf("a joined call returned (%v) before every call had joined or left", err)
		default:
		}
	}
}

func returned(t *testing.T, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a joined call still waits after its gathering went")
	}
}

func TestGatheringOffersTogetherOnceEveryCallJoinedOrLeft(t *testing.T) {
	var o offers
	g, ctxs, done := o.gathering(4)
	a := join(ctxs[0], "a")
	b := join(ctxs[2], "b")
	waitJoined(t, g, 2)
	pending(t, &o, a, b)
	done(1) // answered without a write: a refusal, an error
	waitJoined(t, g, 2)
	pending(t, &o, a)
	c := join(ctxs[3], "c") // the last open call: all three go
	returned(t, a)
	returned(t, b)
	returned(t, c)
	groups, alone, _ := o.snapshot()
	if len(groups) != 1 || len(groups[0]) != 3 || len(alone) != 0 {
		t.Fatalf("offered %v together and %v alone, want the three calls together once", groups, alone)
	}
	done(0) // answered calls leave again: nothing changes
	done(3)
	done(1)
	if groups2, _, _ := o.snapshot(); len(groups2) != 1 {
		t.Fatalf("offered again: %v", groups2)
	}
}

func TestGatheringLastLeaverSendsTheJoined(t *testing.T) {
	var o offers
	g, ctxs, done := o.gathering(3)
	a := join(ctxs[0], "a")
	waitJoined(t, g, 1)
	done(1)
	pending(t, &o, a)
	done(2)
	returned(t, a)
	if groups, _, _ := o.snapshot(); fmt.Sprint(groups) != "[[a]]" {
		t.Fatalf("offered %v, want [[a]]", groups)
	}
}

func TestGatheringKeepsJoinOrder(t *testing.T) {
	var o offers
	g, ctxs, _ := o.gathering(3)
	var chans []<-chan error
	for i, name := range []string{"x", "y", "z"} {
		chans = append(chans, join(ctxs[i], name))
		if i < 2 { // the third join sends them all
			waitJoined(t, g, i+1)
		}
	}
	for _, ch := range chans {
		returned(t, ch)
	}
	if groups, _, _ := o.snapshot(); fmt.Sprint(groups) != "[[x y z]]" {
		t.Fatalf("offered %v, want [[x y z]]", groups)
	}
}

// A call held by something the gathering cannot see is waited for at most
// gatherWait: the timer sends what joined, and the late call goes alone.
func TestGatheringTimerSendsWhatJoinedAndLateCallsGoAlone(t *testing.T) {
	var o offers
	g, ctxs, done := o.gathering(3)
	a := join(ctxs[0], "a")
	waitJoined(t, g, 1)
	b := join(ctxs[1], "b") // joining does not start a second timer
	waitJoined(t, g, 2)
	_, _, timers := o.snapshot()
	if timers != 1 {
		t.Fatalf("%d timers started, want 1 at the first join", timers)
	}
	pending(t, &o, a)
	o.mu.Lock()
	fire := o.timers[0]
	o.mu.Unlock()
	fire()
	returned(t, a)
	returned(t, b)
	late := join(ctxs[2], "late")
	returned(t, late)
	fire() // a timer that fires after the gathering went offers nothing
	done(2)
	groups, alone, _ := o.snapshot()
	if fmt.Sprint(groups) != "[[a b]]" || fmt.Sprint(alone) != "[late]" {
		t.Fatalf("offered %v together and %v alone, want [[a b]] and [late]", groups, alone)
	}
}

// A call that leaves before it writes (it is about to wait for a
// leadership round) writes alone, and no longer holds the others back.
func TestGatheringCallThatLeftWritesAlone(t *testing.T) {
	var o offers
	g, ctxs, _ := o.gathering(2)
	a := join(ctxs[0], "a")
	waitJoined(t, g, 1)
	leaveGathering(ctxs[1])
	returned(t, a)
	returned(t, join(ctxs[1], "b"))
	groups, alone, _ := o.snapshot()
	if fmt.Sprint(groups) != "[[a]]" || fmt.Sprint(alone) != "[b]" {
		t.Fatalf("offered %v together and %v alone, want [[a]] and [b]", groups, alone)
	}
}

// An entry the node refuses to offer (not the leader any more, a format
// it may not write) answers its own call with why; the others go on.
func TestGatheringReportsEachEntrysOwnRefusal(t *testing.T) {
	g := &gathering{open: 2, afterFunc: time.AfterFunc,
		offerAll: func(batch []*gatherEntry) {
			for _, e := range batch {
				if e.cmd.Name == "refused" {
					e.err = ErrNotLeader
					continue
				}
				e.f = doneFuture{index: 7}
			}
		}}
	ctxs, _ := g.calls(context.Background(), 2)
	ok := make(chan raft.ApplyFuture, 1)
	go func() {
		f, err := gathered(ctxs[0]).offer(fsm.Command{Name: "ok"})
		if err != nil {
			t.Error(err)
		}
		ok <- f
	}()
	waitJoined(t, g, 1)
	if _, err := gathered(ctxs[1]).offer(fsm.Command{Name: "refused"}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("refused entry: %v, want ErrNotLeader", err)
	}
	if f := <-ok; f == nil || f.Index() != 7 {
		t.Fatalf("offered entry's future %v, want index 7", f)
	}
}

func TestNoGatheringOutsideABatch(t *testing.T) {
	if gathered(context.Background()) != nil {
		t.Fatal("a plain context has a gathering")
	}
	leaveGathering(context.Background()) // no gathering: nothing to do, no panic
}

// stallingDisk is a log store whose appends block, once stall is set,
// until release is closed: a leader whose disk hangs, so that raft's
// leader loop stops taking entries. The node starts and leads first.
type stallingDisk struct {
	raft.LogStore
	stall   *atomic.Bool
	release chan struct{}
}

func (d stallingDisk) wait() {
	if d.stall.Load() {
		<-d.release
	}
}

func (d stallingDisk) StoreLog(l *raft.Log) error     { d.wait(); return d.LogStore.StoreLog(l) }
func (d stallingDisk) StoreLogs(ls []*raft.Log) error { d.wait(); return d.LogStore.StoreLogs(ls) }

// While raft's apply queue stays full, a batch's calls are refused
// (overloaded: never offered) as soon as calls sent alone would be, after
// one ApplyTimeout for the batch, not one after another.
func TestGatheredCallsShareOneEnqueueTimeout(t *testing.T) {
	const applyTimeout = 100 * time.Millisecond
	var stall atomic.Bool
	release := make(chan struct{})
	n := startSingle(t, Config{ApplyTimeout: applyTimeout, wrapLogs: func(s raft.LogStore) raft.LogStore {
		return stallingDisk{LogStore: s, stall: &stall, release: release}
	}})
	stall.Store(true)
	t.Cleanup(func() { close(release) })
	ctx := context.Background()
	// Fill raft's queue behind the stuck leader loop, until a write alone
	// gets its enqueue timeout: the loop may hold up to MaxAppendEntries
	// (256) in its stuck append, and the queue as many again.
	var shed atomic.Int64
	for i := range 800 {
		go func() {
			_, err := n.Apply(ctx, fsm.Command{Op: fsm.OpRelease, Name: fmt.Sprintf("fill/%d", i), LeaseID: "fill-0123456789abcdef"})
			if errors.Is(err, ErrOverloaded) {
				shed.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for shed.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("raft's apply queue never filled")
		}
		time.Sleep(5 * time.Millisecond)
	}
	const calls = 30
	ctxs, done := n.Gather(ctx, calls)
	errs := make([]error, calls)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = n.Apply(ctxs[i], fsm.Command{Op: fsm.OpRelease, Name: fmt.Sprintf("b/%d", i), LeaseID: "batch-0123456789abcdef"})
			done(i)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for i, err := range errs {
		if !errors.Is(err, ErrOverloaded) {
			t.Errorf("call %d: %v, want ErrOverloaded (never offered)", i, err)
		}
	}
	// Offered one after another, each waiting its own ApplyTimeout, the
	// last would be answered after calls x ApplyTimeout (3 s).
	if took > 10*applyTimeout {
		t.Fatalf("the batch's %d calls were answered after %v; one ApplyTimeout is %v", calls, took, applyTimeout)
	}
}

// If the offer panics, no joined call is left waiting for it: the panic
// goes up the goroutine that offered, and every entry not offered answers
// its own call.
func TestGatheringPanicLeavesNoCallWaiting(t *testing.T) {
	g := &gathering{open: 2, afterFunc: time.AfterFunc,
		offerAll: func([]*gatherEntry) { panic("offer broke") }}
	ctxs, _ := g.calls(context.Background(), 2)
	first := make(chan error, 1)
	go func() {
		_, err := gathered(ctxs[0]).offer(fsm.Command{Name: "a"})
		first <- err
	}()
	waitJoined(t, g, 1)
	func() {
		defer func() {
			if p := recover(); p != "offer broke" {
				t.Errorf("recovered %v, want the offer's panic", p)
			}
		}()
		gathered(ctxs[1]).offer(fsm.Command{Name: "b"}) // the last call offers, and panics
		t.Error("the offer's panic was swallowed")
	}()
	select {
	case err := <-first:
		if !errors.Is(err, errNotOffered) {
			t.Fatalf("the waiting call got %v, want errNotOffered", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a joined call still waits after the offer panicked")
	}
}
