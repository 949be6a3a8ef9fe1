package workload

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"sort"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/register"
)

// The mixed cycles: sessions, semaphore permits and shared locks,
// aimed at the same boundaries as the lock cycle's: waits that end as a
// permit or lock frees (holders release, and sessions close, on the shared
// 400 ms schedule), sessions whose TTL runs out while their client is
// paused or overruns, retries of a grant with the same lease id on another
// node, sessions closed while one of their acquires is parked, and readers
// racing writers. Every choice is drawn from c.mix.

// hold is one lock lease or semaphore permit a cycle holds.
type hold struct {
	sem         bool
	name, lease string
	mode        string // lock: history.Shared or ""
	limit       int64  // permit: the limit asked
	token       uint64
	slot        int
	via         string // the node that granted
}

// holdCycle runs one of the three cycles, one time in four after a
// linearizable read of a semaphore.
func (c *Client) holdCycle(ctx context.Context) {
	if len(c.cfg.Semaphores) > 0 && c.mix.Intn(4) == 0 {
		c.readSemaphore(c.pickHold(true).name)
	}
	switch n := c.mix.Intn(10); {
	case n < 4 && (len(c.cfg.RWLocks) > 0 || len(c.cfg.Semaphores) > 0):
		c.sessionCycle(ctx)
	case n < 7 && len(c.cfg.Semaphores) > 0:
		c.ttlCycle(ctx, true)
	case len(c.cfg.RWLocks) > 0:
		c.ttlCycle(ctx, false)
	default:
		c.sleep(ctx, 100*time.Millisecond)
	}
}

func (c *Client) leaseID(kind string) string {
	c.seqMu.Lock()
	n := c.seq + 1
	c.seqMu.Unlock()
	return fmt.Sprintf("%s%02d-%06d-%08x", kind, c.cfg.ID, n, c.mix.Uint32())
}

// pickHold chooses what to acquire: a semaphore permit (with the
// semaphore's limit, now and then one more, which must be refused
// limit_mismatch while anyone holds a permit) or a lock, shared two times
// in three.
func (c *Client) pickHold(sem bool) hold {
	if sem {
		names := make([]string, 0, len(c.cfg.Semaphores))
		for n := range c.cfg.Semaphores {
			names = append(names, n)
		}
		sort.Strings(names)
		h := hold{sem: true, name: names[c.mix.Intn(len(names))], lease: c.leaseID("p")}
		h.limit = c.cfg.Semaphores[h.name]
		if c.mix.Intn(20) == 0 {
			h.limit++
		}
		return h
	}
	h := hold{name: c.cfg.RWLocks[c.mix.Intn(len(c.cfg.RWLocks))], lease: c.leaseID("r")}
	if c.mix.Intn(3) > 0 {
		h.mode = history.Shared
	}
	return h
}

// request is the journal entry, path and body of h's acquire: with a TTL
// (ttl > 0) or in a session.
func (c *Client) request(h hold, ttl int64, session string) (history.Entry, string, map[string]any) {
	e := history.Entry{Op: history.Acquire, Name: h.name, Lease: h.lease, TTLMs: ttl, Session: session, Mode: h.mode}
	body := map[string]any{"name": h.name, "owner": c.owner(), "lease_id": h.lease}
	if session != "" {
		body["session_id"] = session
	} else {
		body["ttl_ms"] = ttl
	}
	path := "/v1/locks/acquire"
	if h.sem {
		e.Op, e.Mode, e.Limit = history.SemAcquire, "", h.limit
		body["limit"] = h.limit
		path = "/v1/semaphores/acquire"
	} else if h.mode != "" {
		body["mode"] = h.mode
	}
	return e, path, body
}

// grab acquires h, resending an unknown outcome with the same lease id. In a
// boundary cycle a refusal (held, full) is asked again once, waiting until
// about the next release instant.
func (c *Client) grab(ctx context.Context, h *hold, ttl int64, session string, boundary bool) bool {
	e0, path, body0 := c.request(*h, ttl, session)
	var wait int64
	waited := false
	for try := 0; try < 4; try++ {
		e, body := e0, maps.Clone(body0)
		if wait > 0 {
			e.WaitMs, body["wait_ms"] = wait, wait
		}
		r := c.call(e, path, body)
		wait = 0
		switch r.Outcome {
		case history.OK:
			h.token, h.slot, h.via = r.Token, r.Slot, r.Node
			return true
		case history.Held, history.Full:
			if !boundary || waited {
				return false
			}
			waited = true
			end := nextBoundary(history.Now(), 60*time.Millisecond) + int64(time.Duration(c.mix.Intn(41)-5)*time.Millisecond)
			wait = max(1, (end-history.Now())/int64(time.Millisecond))
			try--
		case history.Unknown:
			if !c.sleep(ctx, max(c.retryAfter(r), time.Duration(50+c.mix.Intn(100))*time.Millisecond)) {
				return false
			}
		default: // no_session, limit_mismatch, session_full, 4xx: definite refusals
			return false
		}
	}
	return false
}

// retryOnOther resends h's acquire, same lease id, to another node: while
// h holds it must answer the same token (and slot).
func (c *Client) retryOnOther(h hold, ttl int64, session string) {
	e, path, body := c.request(h, ttl, session)
	c.callOn(c.otherNode(h.via), e, path, body)
}

// release lets h go.
func (c *Client) release(h hold) {
	if h.sem {
		c.call(history.Entry{Op: history.SemRelease, Name: h.name, Lease: h.lease}, "/v1/semaphores/release",
			map[string]any{"name": h.name, "lease_id": h.lease})
		return
	}
	c.call(history.Entry{Op: history.Release, Name: h.name, Lease: h.lease}, "/v1/locks/release",
		map[string]any{"name": h.name, "lease_id": h.lease})
}

// renew renews a hold with a TTL of its own (journalled with the TTL it keeps).
func (c *Client) renew(h hold, ttl int64) bool {
	e := history.Entry{Op: history.Renew, Name: h.name, Lease: h.lease, TTLMs: ttl}
	path := "/v1/locks/renew"
	if h.sem {
		e.Op, path = history.SemRenew, "/v1/semaphores/renew"
	}
	return c.call(e, path, map[string]any{"name": h.name, "lease_id": h.lease}).Outcome == history.OK
}

// slotWrite is a permit's read of the registers of its slot (storage
// fences per slot), to be followed by a write with its token after the
// hold, whatever happened meanwhile, as a paused or overrunning holder's
// would be.
type slotWrite struct {
	name             string
	token            uint64
	fv, uv           int64
	fenced, unfenced bool
}

func (c *Client) slotRead(h hold) slotWrite {
	w := slotWrite{name: fmt.Sprintf("%s#%d", h.name, h.slot), token: h.token}
	w.fv, w.fenced = c.reg(history.FRead, register.Request{Fenced: true, Name: w.name, Token: h.token})
	w.uv, w.unfenced = c.reg(history.URead, register.Request{Name: w.name, Token: h.token})
	return w
}

func (c *Client) slotWrite(w slotWrite) {
	if w.fenced {
		c.reg(history.FWrite, register.Request{Fenced: true, Name: w.name, Token: w.token, Based: w.fv})
	}
	if w.unfenced {
		c.reg(history.UWrite, register.Request{Name: w.name, Token: w.token, Based: w.uv})
	}
}

// holdFor holds until a release instant (boundary) or, renewing every
// third of the TTL when this client renews, for 0.5-2 TTLs; a client that
// does not renew holds 0.3-1.7 TTLs, often past its TTL. renew returns
// false when the hold is lost.
func (c *Client) holdFor(ctx context.Context, ttl int64, boundary bool, renew func() bool) {
	t := time.Duration(ttl) * time.Millisecond
	switch {
	case boundary:
		end := nextBoundary(history.Now(), 100*time.Millisecond)
		c.sleepReal(ctx, time.Duration(end-history.Now()))
	case c.cfg.Renew:
		end := time.Now().Add(c.real(time.Duration(float64(t) * (0.5 + 1.5*c.mix.Float64()))))
		for time.Now().Before(end) {
			if !c.sleepReal(ctx, min(c.real(t/3), time.Until(end))) || time.Now().After(end) {
				return
			}
			if !renew() {
				return
			}
		}
	default:
		c.sleep(ctx, time.Duration(float64(t)*(0.3+1.4*c.mix.Float64())))
	}
}

// ttlCycle holds one permit (sem) or one lock, shared or exclusive, with a
// TTL of its own.
func (c *Client) ttlCycle(ctx context.Context, sem bool) {
	h := c.pickHold(sem)
	ttl := int64(1000 + c.mix.Intn(2001))
	boundary := c.mix.Intn(2) == 0
	if !c.grab(ctx, &h, ttl, "", boundary) {
		c.sleep(ctx, time.Duration(20+c.mix.Intn(130))*time.Millisecond)
		return
	}
	if boundary || c.mix.Intn(3) == 0 {
		c.retryOnOther(h, ttl, "")
	}
	var w slotWrite
	if sem {
		w = c.slotRead(h)
	}
	c.holdFor(ctx, ttl, boundary, func() bool { return c.renew(h, ttl) })
	if sem {
		c.slotWrite(w)
	}
	c.release(h)
}

// sessionCycle creates a session, acquires one to three locks and permits
// in it, holds them by renewing the session (or lets it run out), and
// closes it, often on a release instant so that every waiter of its locks
// and permits is served at once. Now and then it closes the session while
// one of its acquires is parked on the leader.
func (c *Client) sessionCycle(ctx context.Context) {
	ttl := int64(1000 + c.mix.Intn(2001))
	sid := c.leaseID("s")
	created := false
	for try := 0; try < 4 && !created; try++ {
		r := c.call(history.Entry{Op: history.SessCreate, Session: sid, TTLMs: ttl}, "/v1/sessions",
			map[string]any{"owner": c.owner(), "ttl_ms": ttl, "session_id": sid})
		switch r.Outcome {
		case history.OK:
			created = true
		case history.Unknown:
			if !c.sleep(ctx, max(c.retryAfter(r), time.Duration(50+c.mix.Intn(100))*time.Millisecond)) {
				return
			}
		default:
			c.sleep(ctx, 100*time.Millisecond)
			return
		}
	}
	if !created {
		return
	}
	boundary := c.mix.Intn(2) == 0
	var held []hold
	var writes []slotWrite
	for n := 1 + c.mix.Intn(3); n > 0; n-- {
		sem := len(c.cfg.Semaphores) > 0 && (len(c.cfg.RWLocks) == 0 || c.mix.Intn(2) == 0)
		h := c.pickHold(sem)
		if !c.grab(ctx, &h, 0, sid, boundary && n == 1) {
			continue
		}
		if c.mix.Intn(2) == 0 {
			c.retryOnOther(h, 0, sid)
		}
		if sem {
			writes = append(writes, c.slotRead(h))
		}
		held = append(held, h)
	}
	if c.mix.Intn(5) == 0 {
		c.closeWhileAcquiring(ctx, sid, held)
		return
	}
	c.holdFor(ctx, ttl, boundary, func() bool {
		r := c.call(history.Entry{Op: history.SessRenew, Session: sid, TTLMs: ttl}, "/v1/sessions/renew",
			map[string]any{"session_id": sid})
		if r.Outcome == history.Unknown { // the same renew, on another node
			r = c.callOn(c.otherNode(r.Node), history.Entry{Op: history.SessRenew, Session: sid, TTLMs: ttl}, "/v1/sessions/renew",
				map[string]any{"session_id": sid})
		}
		return r.Outcome == history.OK
	})
	for _, w := range writes {
		c.slotWrite(w)
	}
	if len(held) > 0 && c.mix.Intn(3) == 0 {
		c.release(held[c.mix.Intn(len(held))])
	}
	if c.mix.Intn(6) == 0 {
		return // let the session run out
	}
	c.closeSession(ctx, sid)
}

// closeSession closes sid, resending an unknown outcome (a later
// no_session then means an earlier attempt, or expiry, ended it).
func (c *Client) closeSession(ctx context.Context, sid string) {
	for try := 0; try < 3; try++ {
		r := c.call(history.Entry{Op: history.SessClose, Session: sid}, "/v1/sessions/close", map[string]any{"session_id": sid})
		if r.Outcome != history.Unknown || !c.sleep(ctx, max(c.retryAfter(r), 50*time.Millisecond)) {
			return
		}
	}
}

// closeWhileAcquiring parks an acquire of sid (one wait of 0.3-0.8 s) and
// closes the session while it waits: the grant must not outlive the
// session. It asks, with a new lease, exclusively for a lock the session
// itself holds, so it surely parks, behind its own session's hold, which
// the close then frees: the waiter is served just as its session ends.
// Without such a lock it asks for a permit of a semaphore the session
// holds, or anything.
func (c *Client) closeWhileAcquiring(ctx context.Context, sid string, held []hold) {
	var h hold
	for _, x := range held {
		if !x.sem || h.name == "" {
			h = x
		}
	}
	if h.name == "" {
		h = c.pickHold(len(c.cfg.Semaphores) > 0 && (len(c.cfg.RWLocks) == 0 || c.mix.Intn(2) == 0))
	}
	h.lease, h.mode = c.leaseID(map[bool]string{true: "p", false: "r"}[h.sem]), ""
	e, path, body := c.request(h, 0, sid)
	wait := int64(300 + c.mix.Intn(501))
	e.WaitMs, body["wait_ms"] = wait, wait
	node := c.cfg.Nodes[c.mix.Intn(len(c.cfg.Nodes))]
	closeAfter := time.Duration(50+c.mix.Intn(int(wait))) * time.Millisecond
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.callOn(node, e, path, body)
	}()
	c.sleepReal(ctx, closeAfter)
	c.closeSession(ctx, sid)
	<-done
}

// readSemaphore is one linearizable read of a semaphore: its limit and
// holders as the leader has them.
func (c *Client) readSemaphore(name string) {
	node := c.cfg.Nodes[c.mix.Intn(len(c.cfg.Nodes))]
	e := history.Entry{Kind: "call", ID: c.nextID(), Client: c.cfg.ID, Op: history.SemRead, Name: name, Node: node, Time: history.Now()}
	c.cfg.Journal.Write(e)
	resp, err := c.http.Get(node + "/v1/semaphores/" + url.PathEscape(name))
	r := c.classify(resp, err)
	r.ID, r.Client = e.ID, e.Client
	c.cfg.Journal.Write(r)
}
