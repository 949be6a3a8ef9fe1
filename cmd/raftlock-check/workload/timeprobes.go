package workload

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/register"
)

// The time-probe cycles probe the time bounds (l), (m) and (n) on names of
// their own (TTLLocks, SessLocks): a holder that abandons its lease or its
// session (never renews, releases or closes it), a prober that parks an
// acquire until about when it must end and, if refused, reads the lock
// until the abandoned lease is gone, and a hand-off that holds briefly and
// releases while others are parked for the lock. Every choice is drawn from
// c.tim, so --time-probes 0 replays a seed's other cycles exactly.

// Time-probe cycle kinds (Config.ProbeKinds).
const (
	ProbeAbandon = "abandon" // abandonLease
	ProbeSession = "session" // abandonSession
	ProbeHandoff = "handoff" // handoff
)

// timeCycle runs one time-probe cycle: of five, two abandon a lease, one a
// session, two hand a lock off, among the kinds allowed.
func (c *Client) timeCycle(ctx context.Context) {
	kinds := []string{ProbeAbandon, ProbeAbandon, ProbeSession, ProbeHandoff, ProbeHandoff}
	if len(c.cfg.SessLocks) == 0 {
		kinds = slices.DeleteFunc(kinds, func(k string) bool { return k == ProbeSession })
	}
	if len(c.cfg.ProbeKinds) > 0 {
		kinds = slices.DeleteFunc(kinds, func(k string) bool { return !slices.Contains(c.cfg.ProbeKinds, k) })
	}
	if len(kinds) == 0 {
		c.sleep(ctx, 100*time.Millisecond)
		return
	}
	switch kinds[c.tim.Intn(len(kinds))] {
	case ProbeSession:
		c.abandonSession(ctx)
	case ProbeHandoff:
		c.handoff(ctx)
	default:
		c.abandonLease(ctx)
	}
}

func (c *Client) probeLease(kind string) string {
	c.seqMu.Lock()
	n := c.seq + 1
	c.seqMu.Unlock()
	return fmt.Sprintf("t%s%02d-%06d-%08x", kind, c.cfg.ID, n, c.tim.Uint32())
}

func (c *Client) probeNode() string { return c.cfg.Nodes[c.tim.Intn(len(c.cfg.Nodes))] }

// longWait is how long a refused cycle parks its acquire: long enough to
// outlast an abandoned lease often, and a hand-off's hold always.
func (c *Client) longWait() time.Duration {
	return time.Duration(3000+c.tim.Intn(6001)) * time.Millisecond
}

// acquireUntil asks for name with lease (a TTL, or in session), parking
// until the instant until (no wait if it has passed). An unknown outcome is
// resent with the same lease id and the wait left.
func (c *Client) acquireUntil(ctx context.Context, name, lease string, ttl int64, session string, until int64) history.Entry {
	var r history.Entry
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		wait := max(0, (until-history.Now())/int64(time.Millisecond))
		e := history.Entry{Op: history.Acquire, Name: name, Lease: lease, TTLMs: ttl, WaitMs: wait, Session: session}
		body := map[string]any{"name": name, "owner": c.owner(), "lease_id": lease}
		if session != "" {
			body["session_id"] = session
		} else {
			body["ttl_ms"] = ttl
		}
		if wait > 0 {
			body["wait_ms"] = wait
		}
		r = c.callSlow(c.probeNode(), e, "/v1/locks/acquire", body)
		if r.Outcome != history.Unknown {
			return r
		}
		if !c.sleep(ctx, max(c.retryAfter(r), 100*time.Millisecond)) {
			break
		}
	}
	return r
}

// callSlow is callOn with a client whose timeout outlasts the longest
// wait_ms a probe asks for.
func (c *Client) callSlow(node string, e history.Entry, path string, body any) history.Entry {
	return c.post(c.slow, node, e, path, body)
}

// probeRead is one linearizable read of a lock at a random node.
func (c *Client) probeRead(name string) history.Entry {
	node := c.probeNode()
	e := history.Entry{Kind: "call", ID: c.nextID(), Client: c.cfg.ID, Op: history.Read, Name: name, Node: node, Time: history.Now()}
	c.cfg.Journal.Write(e)
	resp, err := c.http.Get(node + "/v1/locks/" + url.PathEscape(name))
	r := c.classify(resp, err)
	r.ID, r.Client = e.ID, e.Client
	c.cfg.Journal.Write(r)
	return r
}

// watchOut reads name every 200-300 ms until no read shows token among its
// holders, or until the instant until. Each read sent after the lease's
// bound that still shows it is a violation of (l) or (n).
func (c *Client) watchOut(ctx context.Context, name string, token uint64, until int64) {
	for ctx.Err() == nil && history.Now() < until {
		r := c.probeRead(name)
		held := r.Outcome == history.OK && r.Token == token
		for _, t := range r.Tokens {
			held = held || t == token
		}
		if r.Outcome == history.Free || r.Outcome == history.OK && !held {
			return
		}
		c.sleepReal(ctx, time.Duration(200+c.tim.Intn(101))*time.Millisecond)
	}
}

// takeOrWait acquires name with a TTL, parking a long wait when it is held.
// Refused after the wait, it watches the holder it was told of out.
func (c *Client) takeOrWait(ctx context.Context, name, lease string, ttl int64) (history.Entry, bool) {
	r := c.acquireUntil(ctx, name, lease, ttl, "", 0)
	if r.Outcome == history.Held {
		r = c.acquireUntil(ctx, name, lease, ttl, "", history.Now()+int64(c.longWait()))
	}
	if r.Outcome == history.Held && r.Holder != 0 {
		c.watchOut(ctx, name, r.Holder, history.Now()+int64(12*time.Second))
	}
	return r, r.Outcome == history.OK
}

// abandonLease takes a lock with a TTL of 3-10 s, reads the registers with
// its token and abandons the lease. The same client then, as a new lease,
// parks an acquire until a second past the abandoned lease's TTL from its
// grant's answer; refused, it reads until the lease is gone and asks once
// more. Granted, it reads the registers, lets the abandoned holder write
// late with its old token (a holder that stalled and came back: the fenced
// register must refuse it, the unfenced one loses its write to the new
// holder's) and releases, while others are often parked for the lock.
func (c *Client) abandonLease(ctx context.Context) {
	name := c.cfg.TTLLocks[c.tim.Intn(len(c.cfg.TTLLocks))]
	ttl := int64(3000 + c.tim.Intn(7001))
	a, ok := c.takeOrWait(ctx, name, c.probeLease("a"), ttl)
	if !ok {
		c.sleep(ctx, 100*time.Millisecond)
		return
	}
	fv, fok := c.reg(history.FRead, register.Request{Fenced: true, Name: name, Token: a.Token})
	uv, _ := c.reg(history.URead, register.Request{Name: name, Token: a.Token})
	granted := a.Time // the answer: the grant was stamped before it
	lateWrites := func() {
		if fok {
			c.reg(history.FWrite, register.Request{Fenced: true, Name: name, Token: a.Token, Based: fv})
		}
		c.reg(history.UWrite, register.Request{Name: name, Token: a.Token, Based: uv})
	}
	end := granted + ttl*int64(time.Millisecond)
	b := c.probe(ctx, name, a.Token, end)
	if b.Outcome != history.OK {
		lateWrites()
		return
	}
	bf, bfok := c.reg(history.FRead, register.Request{Fenced: true, Name: name, Token: b.Token})
	bu, _ := c.reg(history.URead, register.Request{Name: name, Token: b.Token})
	lateWrites()
	if bfok {
		c.reg(history.FWrite, register.Request{Fenced: true, Name: name, Token: b.Token, Based: bf})
	}
	c.reg(history.UWrite, register.Request{Name: name, Token: b.Token, Based: bu})
	c.callOn(c.probeNode(), history.Entry{Op: history.Release, Name: name, Lease: b.Lease}, "/v1/locks/release",
		map[string]any{"name": name, "lease_id": b.Lease})
}

// probe waits for the lease with token on name to end at end (its TTL
// from its grant's answer): an acquire parked until a second past end,
// then, refused, reads until the lease is gone (12 s past end at most) and
// one more acquire without waiting. It returns the last acquire's answer,
// with its lease id.
func (c *Client) probe(ctx context.Context, name string, token uint64, end int64) history.Entry {
	lease := c.probeLease("b")
	ttl := int64(1000 + c.tim.Intn(1001))
	b := c.acquireUntil(ctx, name, lease, ttl, "", end+int64(time.Second))
	if b.Outcome != history.OK {
		c.watchOut(ctx, name, token, end+int64(12*time.Second))
		b = c.acquireUntil(ctx, name, lease, ttl, "", 0)
	}
	b.Lease = lease
	return b
}

// abandonSession creates a session (TTL 2-5 s), takes a lock in it and
// abandons the session; the same client, as a TTL lease, then probes the
// lock as abandonLease does, and releases it if granted.
func (c *Client) abandonSession(ctx context.Context) {
	name := c.cfg.SessLocks[c.tim.Intn(len(c.cfg.SessLocks))]
	ttl := int64(2000 + c.tim.Intn(3001))
	sid := c.probeLease("s")
	var s history.Entry
	for try := 0; try < 4; try++ {
		s = c.callOn(c.probeNode(), history.Entry{Op: history.SessCreate, Session: sid, TTLMs: ttl}, "/v1/sessions",
			map[string]any{"owner": c.owner(), "ttl_ms": ttl, "session_id": sid})
		if s.Outcome != history.Unknown || !c.sleep(ctx, max(c.retryAfter(s), 100*time.Millisecond)) {
			break
		}
	}
	if s.Outcome != history.OK {
		c.sleep(ctx, 100*time.Millisecond)
		return
	}
	created := s.Time
	a := c.acquireUntil(ctx, name, c.probeLease("l"), 0, sid, 0)
	if a.Outcome != history.OK {
		if a.Outcome == history.Held && a.Holder != 0 {
			c.watchOut(ctx, name, a.Holder, history.Now()+int64(12*time.Second))
		}
		return // the session runs out unused
	}
	b := c.probe(ctx, name, a.Token, created+ttl*int64(time.Millisecond))
	if b.Outcome == history.OK {
		c.callOn(c.probeNode(), history.Entry{Op: history.Release, Name: name, Lease: b.Lease}, "/v1/locks/release",
			map[string]any{"name": name, "lease_id": b.Lease})
	}
}

// handoff takes a lock with a TTL of 1-3 s (parking a long wait when it is
// held), holds it 0.2-1 s and releases it: whoever is parked for it must be
// granted promptly, (m).
func (c *Client) handoff(ctx context.Context) {
	name := c.cfg.TTLLocks[c.tim.Intn(len(c.cfg.TTLLocks))]
	ttl := int64(1000 + c.tim.Intn(2001))
	lease := c.probeLease("h")
	if _, ok := c.takeOrWait(ctx, name, lease, ttl); !ok {
		c.sleep(ctx, 100*time.Millisecond)
		return
	}
	c.sleepReal(ctx, time.Duration(200+c.tim.Intn(801))*time.Millisecond)
	c.callOn(c.probeNode(), history.Entry{Op: history.Release, Name: name, Lease: lease}, "/v1/locks/release",
		map[string]any{"name": name, "lease_id": lease})
}
