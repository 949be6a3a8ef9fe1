package raftnode

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// A gathering offers to Raft, back to back from one goroutine, the writes
// of calls served together: the calls of one POST /v1/batch. Each write is
// still an entry of its own, with its own index, fencing token and answer;
// what changes is only when the entries reach Raft. Raft's leader loop
// takes the first entry offered as soon as it arrives, with whatever else
// is queued by then, and each such take costs one fdatasync on the leader
// and, on every follower, one AppendEntries with its fdatasync and
// goroutine hand-offs. Calls that offer their entries each from its own
// goroutine as they come reach it one or two at a time; offered together,
// a batch's entries go to disk and to the followers as one.
//
// A call joins the gathering when it reaches Raft and waits there until
// every other call of the gathering has joined too or has been answered
// without a write (a refusal, an error, a call forwarded elsewhere). The
// batch's answer waits for its slowest call anyway, so waiting for it
// costs the batch nothing. A call about to wait for something else first
// (a leadership round before a refusal, the term's survey of command
// formats) leaves the gathering, and gatherWait bounds the wait for
// anything else.
type gathering struct {
	// offerAll offers the joined entries, in order; alone offers one entry
	// of a call that comes after the gathering went. Node.Gather sets them
	// to the node's; tests replace them.
	offerAll func([]*gatherEntry)
	alone    func(fsm.Command) (raft.ApplyFuture, error)
	// afterFunc starts the gatherWait timer (time.AfterFunc).
	afterFunc func(time.Duration, func()) *time.Timer

	mu      sync.Mutex
	open    int            // calls that have neither joined nor left
	joined  []*gatherEntry // entries waiting to be offered
	timer   *time.Timer    // armed at the first join while calls are open
	offered bool           // the joined entries went; later calls go alone
}

// gatherWait bounds how long a call waits at Raft's door for the other
// calls of its gathering. It is a safety net, reached only when a call is
// held by something the gathering does not know of.
const gatherWait = 2 * time.Millisecond

// gatherCall is one call's place in a gathering.
type gatherCall struct {
	g *gathering
	// out: the call has joined, left, or gone to Raft alone, so it is no
	// longer among the open calls. Guarded by g.mu.
	out bool
}

// gatherEntry is a joined call's write and, once offered, its future.
type gatherEntry struct {
	cmd   fsm.Command
	ready chan struct{} // closed once f and err are set
	f     raft.ApplyFuture
	err   error // not offered: why
}

type gatherKey struct{}

// Gather prepares the writes of calls served together to reach Raft
// together. It returns the context to serve each call with, and done, to
// call with a call's number once it has been answered. A call that writes
// nothing through this node costs the others no more than its own time to
// be answered.
func (n *Node) Gather(ctx context.Context, calls int) ([]context.Context, func(call int)) {
	g := &gathering{open: calls, offerAll: n.offerAll, afterFunc: time.AfterFunc,
		alone: func(cmd fsm.Command) (raft.ApplyFuture, error) { return n.offer(cmd, extension{}) }}
	return g.calls(ctx, calls)
}

func (g *gathering) calls(ctx context.Context, calls int) ([]context.Context, func(call int)) {
	places := make([]gatherCall, calls)
	ctxs := make([]context.Context, calls)
	for i := range places {
		places[i].g = g
		ctxs[i] = context.WithValue(ctx, gatherKey{}, &places[i])
	}
	return ctxs, func(call int) { places[call].leave() }
}

// gathered returns the place of the call ctx serves in its gathering, if
// it has one.
func gathered(ctx context.Context) *gatherCall {
	c, _ := ctx.Value(gatherKey{}).(*gatherCall)
	return c
}

// leaveGathering takes the call ctx serves out of its gathering, if any,
// before it waits for something else than Raft: whatever it writes after
// goes to Raft alone.
func leaveGathering(ctx context.Context) {
	if c := gathered(ctx); c != nil {
		c.leave()
	}
}

// offer hands cmd to Raft with the gathering's other writes, or alone when
// the call has left it or the gathering has gone. It returns cmd's future,
// or why cmd was not offered.
func (c *gatherCall) offer(cmd fsm.Command) (raft.ApplyFuture, error) {
	g := c.g
	g.mu.Lock()
	if c.out || g.offered {
		c.out = true
		g.mu.Unlock()
		return g.alone(cmd)
	}
	c.out = true
	g.open--
	e := &gatherEntry{cmd: cmd, ready: make(chan struct{})}
	g.joined = append(g.joined, e)
	var batch []*gatherEntry
	switch {
	case g.open == 0:
		batch = g.take()
	case g.timer == nil:
		g.timer = g.afterFunc(gatherWait, g.flush)
	}
	g.mu.Unlock()
	g.offerNow(batch)
	<-e.ready
	return e.f, e.err
}

// leave marks the call answered, or gone to Raft alone. The joined
// entries go once no call is open.
func (c *gatherCall) leave() {
	g := c.g
	g.mu.Lock()
	if c.out {
		g.mu.Unlock()
		return
	}
	c.out = true
	g.open--
	var batch []*gatherEntry
	if g.open == 0 {
		batch = g.take()
	}
	g.mu.Unlock()
	g.offerNow(batch)
}

// flush offers what has joined when gatherWait is up.
func (g *gathering) flush() {
	g.mu.Lock()
	batch := g.take()
	g.mu.Unlock()
	g.offerNow(batch)
}

// take hands over the joined entries, once; g.mu is held.
func (g *gathering) take() []*gatherEntry {
	if g.offered {
		return nil
	}
	g.offered = true
	if g.timer != nil {
		g.timer.Stop()
	}
	batch := g.joined
	g.joined = nil
	return batch
}

// offerNow offers batch, if any, and lets its calls go on to wait for
// their entries, whatever happens to the offer: a call left waiting on
// ready would hold its batch's answer for ever.
func (g *gathering) offerNow(batch []*gatherEntry) {
	if len(batch) == 0 {
		return
	}
	defer func() {
		for _, e := range batch {
			if e.f == nil && e.err == nil {
				e.err = errNotOffered
			}
			close(e.ready)
		}
	}()
	g.offerAll(batch)
}

// errNotOffered answers a gathered call whose entry the offer did not
// reach (it panicked): nothing of it reached Raft.
var errNotOffered = errors.New("raftnode: the write was not offered to raft")

// offerAll offers the entries to Raft in order. Every entry is built first
// and the offers then follow each other with nothing in between: Raft's
// leader loop, woken by the first, takes whatever is queued when it runs.
// The batch shares one ApplyTimeout, as its calls sent alone would each
// wait one at once: while Raft's queue stays full, the entries not offered
// by then are refused at once (overloaded, never offered), not each after
// a timeout of its own.
func (n *Node) offerAll(batch []*gatherEntry) {
	logs := make([]raft.Log, len(batch))
	n.appendMu.RLock() // a backup restore must see no entry land while it runs (backup.go)
	defer n.appendMu.RUnlock()
	for i, e := range batch {
		logs[i], e.err = n.entry(e.cmd, extension{})
	}
	deadline := time.Now().Add(n.cfg.ApplyTimeout)
	for i, e := range batch {
		if e.err != nil {
			continue
		}
		wait := time.Until(deadline)
		if wait <= 0 { // ApplyLog would take 0 for no timeout at all
			e.err = ErrOverloaded
			continue
		}
		e.f = n.raft.ApplyLog(logs[i], wait)
	}
}
