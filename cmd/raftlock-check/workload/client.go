// Package workload is one workload client: a separate process (the checker
// re-executes itself as "raftlock-check client") that loops acquire, hold
// (renewing, or overrunning its lease on purpose), read-modify-write of the
// fenced and unfenced registers, release, and now and then a linearizable
// read, plain or blocking. Acquires carry a value, which holders sometimes
// update. It talks raw HTTP so that every call is journalled exactly: a "call"
// line before the request is sent, a "ret" line after the answer.
package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/register"
)

// Config is one client's part of the workload.
type Config struct {
	ID       int
	Nodes    []string // base URLs of the nodes
	Register string   // base URL of the register server
	Locks    []string
	Renew    bool // renew while holding; otherwise hold without renewing, often past the TTL
	Seed     int64
	Timeout  time.Duration // per request; a timeout is an unknown outcome
	// ClockRate, when set, is how fast this client's clock runs against
	// CLOCK_MONOTONIC (--clock-faults): its holds and renewals are timed
	// on that clock, and the checker judges its leases by it.
	ClockRate float64
	Journal   *history.Journal
	// Mix is the share of cycles that use sessions, semaphore permits or
	// shared locks, on RWLocks and Semaphores, names of their
	// own; 0 runs the lock workload alone.
	Mix        float64
	RWLocks    []string
	Semaphores map[string]int64 // name -> limit
	// TimeProbes is the share of cycles that probe the time bounds
	// (timeprobes.go) on TTLLocks and SessLocks, names of their own.
	TimeProbes float64
	TTLLocks   []string
	SessLocks  []string
	// ProbeKinds, if set, limits the time probes to these cycles:
	// "abandon", "session", "handoff" (timeprobes.go).
	ProbeKinds []string
	// Batch is the share of the lock cycle's acquires (without a wait),
	// renews and releases sent in a POST /v1/batch (batch.go).
	Batch float64
}

// Client runs the loop.
type Client struct {
	cfg Config
	rnd *rand.Rand
	// mix draws every choice of the session, semaphore and shared-lock
	// cycles, so that with Mix 0 a seed replays the lock workload's choices
	// exactly as before those cycles existed.
	mix *rand.Rand
	// tim draws every choice of the time-probe cycles, likewise.
	tim *rand.Rand
	// bat draws which calls go in batches and their companions.
	bat  *rand.Rand
	http *http.Client
	// slow has a timeout past the longest wait a time probe parks.
	slow  *http.Client
	seqMu sync.Mutex // a close sent while an acquire of its session is in flight
	seq   int
	vals  int // values sent so far
	// seen is the index of this client's latest read of each lock: a
	// blocking read asks for a change past it.
	seen map[string]uint64
}

// New makes a client.
func New(cfg Config) *Client {
	t := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 500 * time.Millisecond}).DialContext,
		MaxIdleConnsPerHost: 4,
	}
	return &Client{cfg: cfg, rnd: rand.New(rand.NewSource(cfg.Seed)), mix: rand.New(rand.NewSource(cfg.Seed ^ 0x15)),
		tim: rand.New(rand.NewSource(cfg.Seed ^ 0x25)), bat: rand.New(rand.NewSource(cfg.Seed ^ 0x35)), http: &http.Client{Transport: t, Timeout: cfg.Timeout},
		slow: &http.Client{Transport: t, Timeout: 15*time.Second + cfg.Timeout}, seen: map[string]uint64{}}
}

func (c *Client) owner() string { return fmt.Sprintf("c%d", c.cfg.ID) }

// value is a fresh value, unique in the run: client id and a counter.
func (c *Client) value() string {
	c.vals++
	return fmt.Sprintf("c%d-v%d", c.cfg.ID, c.vals)
}

func (c *Client) nextID() string {
	c.seqMu.Lock()
	defer c.seqMu.Unlock()
	c.seq++
	return fmt.Sprintf("c%d-%d", c.cfg.ID, c.seq)
}

// Run loops until ctx ends.
func (c *Client) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if c.cfg.TimeProbes > 0 && len(c.cfg.TTLLocks) > 0 && c.tim.Float64() < c.cfg.TimeProbes {
			c.timeCycle(ctx)
			continue
		}
		if c.cfg.Mix > 0 && c.mix.Float64() < c.cfg.Mix {
			c.holdCycle(ctx)
			continue
		}
		if c.rnd.Intn(4) == 0 {
			c.read(c.cfg.Locks[c.rnd.Intn(len(c.cfg.Locks))])
		}
		c.cycle(ctx)
	}
}

// sleep waits d of this client's clock (ClockRate).
func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	return c.sleepReal(ctx, c.real(d))
}

// sleepReal waits d of CLOCK_MONOTONIC, the clock the history is timed by.
func (c *Client) sleepReal(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// real is how long d of this client's clock lasts.
func (c *Client) real(d time.Duration) time.Duration {
	if c.cfg.ClockRate <= 0 {
		return d
	}
	return time.Duration(float64(d) / c.cfg.ClockRate)
}

// Boundary is the period of the shared release schedule. In a boundary
// cycle a holder releases at the next multiple of it (of CLOCK_MONOTONIC,
// one clock for every process) and a client refused the lock asks to wait
// until about that same instant, so waits often run out just as the lock
// frees and its grant to the head waiter is in flight: the moment when a
// server must let that grant stand.
const Boundary = 400 * time.Millisecond

// nextBoundary returns the first release instant at least lead after now.
func nextBoundary(now int64, lead time.Duration) int64 {
	p := int64(Boundary)
	return (now+int64(lead))/p*p + p
}

// cycle is one acquire, hold, write, release.
func (c *Client) cycle(ctx context.Context) {
	name := c.cfg.Locks[c.rnd.Intn(len(c.cfg.Locks))]
	ttl := int64(1000 + c.rnd.Intn(2001))
	lease := fmt.Sprintf("c%02d-%06d-%08x", c.cfg.ID, c.seq+1, c.rnd.Uint32())
	boundary := c.rnd.Intn(5) < 2
	var tok uint64
	var via string // the node that granted
	var wait int64 // ms; set once, for the first held answer of a boundary cycle
	waited := false
	val := c.value()
	// An unknown outcome is retried with the same lease id (and value).
	for try := 0; try < 4; try++ {
		body := map[string]any{"name": name, "owner": c.owner(), "ttl_ms": ttl, "lease_id": lease, "value": val}
		if wait > 0 {
			body["wait_ms"] = wait
		}
		e := c.call(history.Entry{Op: history.Acquire, Name: name, Lease: lease, TTLMs: ttl, WaitMs: wait, Value: val}, "/v1/locks/acquire", body)
		wait = 0
		if e.Outcome == history.OK {
			tok, via = e.Token, e.Node
			break
		}
		if e.Outcome == history.Held {
			if !boundary || waited {
				break
			}
			// Wait until the next release instant, give or take the time
			// a release takes to commit and a grant to start: each takes
			// about a millisecond on a quiet cluster, several on a loaded
			// one, so the waits crowd the first milliseconds after it.
			waited = true
			spread := c.rnd.Intn(13) - 2
			if c.rnd.Intn(4) == 0 {
				spread = c.rnd.Intn(41) - 5
			}
			end := nextBoundary(history.Now(), 60*time.Millisecond) + int64(time.Duration(spread)*time.Millisecond)
			wait = max(1, (end-history.Now())/int64(time.Millisecond))
			try--
			continue
		}
		if !c.sleep(ctx, max(c.retryAfter(e), time.Duration(50+c.rnd.Intn(100))*time.Millisecond)) {
			break
		}
	}
	if tok == 0 {
		c.sleep(ctx, time.Duration(20+c.rnd.Intn(130))*time.Millisecond)
		return
	}
	if boundary {
		// An idempotent retry of the same acquire on another node: while
		// the lease holds it must answer the same token.
		c.callOn(c.otherNode(via), history.Entry{Op: history.Acquire, Name: name, Lease: lease, TTLMs: ttl, Value: val}, "/v1/locks/acquire",
			map[string]any{"name": name, "owner": c.owner(), "ttl_ms": ttl, "lease_id": lease, "value": val})
	} else if c.rnd.Intn(2) == 0 {
		c.update(ctx, name, lease)
	}
	fv, fok := c.reg(history.FRead, register.Request{Fenced: true, Name: name, Token: tok})
	uv, _ := c.reg(history.URead, register.Request{Name: name, Token: tok})
	t := time.Duration(ttl) * time.Millisecond
	switch {
	case boundary:
		// Hold until a release instant, then release on it.
		// The schedule is shared by every client, so it is kept on
		// CLOCK_MONOTONIC, not on this client's skewed clock: the hold
		// is far shorter than the TTL either way.
		end := nextBoundary(history.Now(), 100*time.Millisecond)
		c.sleepReal(ctx, time.Duration(end-history.Now()))
	case c.cfg.Renew:
		hold := time.Duration(float64(t) * (0.5 + 1.5*c.rnd.Float64()))
		// Hold and renew by this client's clock.
		end := time.Now().Add(c.real(hold))
		for time.Now().Before(end) {
			if !c.sleepReal(ctx, min(c.real(t/3), time.Until(end))) {
				break
			}
			if time.Now().After(end) {
				break
			}
			e := c.call(history.Entry{Op: history.Renew, Name: name, Lease: lease, TTLMs: ttl}, "/v1/locks/renew",
				map[string]any{"name": name, "lease_id": lease})
			if e.Outcome != history.OK {
				break
			}
			if c.rnd.Intn(3) == 0 {
				c.update(ctx, name, lease)
			}
		}
	default:
		c.sleep(ctx, time.Duration(float64(t)*(0.3+1.4*c.rnd.Float64())))
	}
	// Write whatever happened meanwhile: a client that overran its lease or
	// was paused writes with its old token, as real ones do.
	if fok {
		v, ok := c.reg(history.FWrite, register.Request{Fenced: true, Name: name, Token: tok, Based: fv})
		if ok && c.rnd.Intn(8) == 0 {
			// A second write under one token: the shipped guard
			// (client/fence) accepts a token once per resource, so this
			// one must be refused.
			c.reg(history.FWrite, register.Request{Fenced: true, Name: name, Token: tok, Based: v, Again: true})
		}
	}
	c.reg(history.UWrite, register.Request{Name: name, Token: tok, Based: uv})
	c.call(history.Entry{Op: history.Release, Name: name, Lease: lease}, "/v1/locks/release",
		map[string]any{"name": name, "lease_id": lease})
}

// otherNode returns a node other than not (any node if there is one only).
func (c *Client) otherNode(not string) string {
	if len(c.cfg.Nodes) < 2 {
		return c.cfg.Nodes[0]
	}
	for {
		if n := c.cfg.Nodes[c.rnd.Intn(len(c.cfg.Nodes))]; n != not {
			return n
		}
	}
}

// retryAfter is how long an unknown outcome's Retry-After asked to wait,
// at most a second.
func (c *Client) retryAfter(e history.Entry) time.Duration {
	return min(time.Duration(e.RetryAfter)*time.Second, time.Second)
}

// call sends one lock request to a random node, journalling it.
func (c *Client) call(e history.Entry, path string, body any) history.Entry {
	return c.callOn(c.cfg.Nodes[c.rnd.Intn(len(c.cfg.Nodes))], e, path, body)
}

// callOn sends one lock request to node, journalling it.
func (c *Client) callOn(node string, e history.Entry, path string, body any) history.Entry {
	return c.post(c.http, node, e, path, body)
}

// post sends one lock request to node with hc, journalling it.
func (c *Client) post(hc *http.Client, node string, e history.Entry, path string, body any) history.Entry {
	if c.batchable(e, path) && c.bat.Float64() < c.cfg.Batch {
		return c.postBatch(hc, node, e, path, body)
	}
	b, _ := json.Marshal(body)
	e.Kind, e.ID, e.Client, e.Node = "call", c.nextID(), c.cfg.ID, node
	e.Time = history.Now()
	c.cfg.Journal.Write(e)
	resp, err := hc.Post(node+path, "application/json", bytes.NewReader(b))
	r := c.classify(resp, err)
	r.ID, r.Client, r.Node = e.ID, e.Client, node
	c.cfg.Journal.Write(r)
	return r
}

// update sets a new value on a lock this client holds. An unknown outcome
// (503 not_supported_yet just after an election, 504, timeout) is resent
// once after its Retry-After: resending a value is harmless.
func (c *Client) update(ctx context.Context, name, lease string) {
	val := c.value()
	for try := 0; try < 2; try++ {
		e := c.call(history.Entry{Op: history.Update, Name: name, Lease: lease, Value: val}, "/v1/locks/update",
			map[string]any{"name": name, "lease_id": lease, "value": val})
		if e.Outcome != history.Unknown || !c.sleep(ctx, max(c.retryAfter(e), 50*time.Millisecond)) {
			return
		}
	}
}

// read is one linearizable read of a lock. Half the time it is followed by
// a blocking read asking for a change past the index just seen (so that it
// parks, to be woken by a change or run out its 200-800 ms wait).
func (c *Client) read(name string) {
	c.readOnce(name, false)
	if c.rnd.Intn(2) == 0 {
		c.readOnce(name, true)
	}
}

// readOnce is one read; a blocking one asks for a change past the index
// this client last read of the lock.
func (c *Client) readOnce(name string, blocking bool) {
	node := c.cfg.Nodes[c.rnd.Intn(len(c.cfg.Nodes))]
	e := history.Entry{Kind: "call", ID: c.nextID(), Client: c.cfg.ID, Op: history.Read, Name: name, Node: node}
	u := node + "/v1/locks/" + url.PathEscape(name)
	if blocking {
		e.Index, e.WaitMs = c.seen[name], int64(200+c.rnd.Intn(601))
		u += fmt.Sprintf("?index=%d&wait_ms=%d", e.Index, e.WaitMs)
	}
	e.Time = history.Now()
	c.cfg.Journal.Write(e)
	resp, err := c.http.Get(u)
	r := c.classify(resp, err)
	r.ID, r.Client = e.ID, e.Client
	c.cfg.Journal.Write(r)
	if r.Outcome == history.OK || r.Outcome == history.Free {
		c.seen[name] = r.Index
	}
}

// classify reads an answer into a "ret" entry, stamping its time.
func (c *Client) classify(resp *http.Response, err error) history.Entry {
	// The answer (or the failure) is in: headers arrive after the server
	// decided, so this is a valid return time.
	r := history.Entry{Kind: "ret", Time: history.Now()}
	if err != nil {
		r.Err = err.Error()
		r.Outcome = history.Unknown
		if errors.Is(err, syscall.ECONNREFUSED) {
			r.Outcome = history.Fail // never reached a server
		}
		return r
	}
	defer resp.Body.Close()
	raw, rerr := io.ReadAll(resp.Body)
	r.Status = resp.StatusCode
	var body struct {
		Error  string `json:"error"`
		Held   *bool  `json:"held"`
		Token  uint64 `json:"fencing_token"`
		Holder struct {
			Token uint64 `json:"fencing_token"`
		} `json:"holder"`
		Value string  `json:"value"`
		Index *uint64 `json:"index"`
		// Sessions and semaphores.
		SessionID string `json:"session_id"`
		Slot      int    `json:"slot"`
		Limit     int64  `json:"limit"`
		Holders   []struct {
			Slot  int    `json:"slot"`
			Token uint64 `json:"fencing_token"`
		} `json:"holders"`
	}
	jerr := json.Unmarshal(raw, &body)
	switch {
	case rerr != nil || (resp.StatusCode < 300 && jerr != nil):
		r.Outcome, r.Err = history.Unknown, fmt.Sprint("reading the answer: ", rerr, jerr)
	case resp.StatusCode == http.StatusOK:
		r.Outcome, r.Token, r.Value = history.OK, body.Token, body.Value
		r.Session, r.Slot, r.Limit = body.SessionID, body.Slot, body.Limit
		for _, h := range body.Holders {
			r.Slots, r.Tokens = append(r.Slots, h.Slot), append(r.Tokens, h.Token)
		}
		if body.Held != nil && !*body.Held {
			r.Outcome = history.Free
		}
		if body.Index != nil {
			r.Index = *body.Index
		} else if n, err := strconv.ParseUint(resp.Header.Get("X-Raftlock-Index"), 10, 64); err == nil {
			r.Index = n
		}
	case resp.StatusCode == http.StatusConflict && body.Error == "held":
		r.Outcome, r.Holder = history.Held, body.Holder.Token
	case resp.StatusCode == http.StatusConflict && body.Error == "not_holder":
		r.Outcome = history.NotHolder
	case resp.StatusCode == http.StatusConflict && body.Error == "full":
		r.Outcome = history.Full
	case resp.StatusCode == http.StatusConflict && body.Error == "limit_mismatch":
		r.Outcome, r.Limit = history.LimitMismatch, body.Limit
	case resp.StatusCode == http.StatusConflict && body.Error == "session_full":
		r.Outcome = history.SessionFull
	case resp.StatusCode == http.StatusNotFound && body.Error == "no_session":
		// Definite: nothing applied, and the session is unknown or ended.
		r.Outcome = history.NoSession
	case resp.StatusCode == http.StatusGatewayTimeout:
		// 504 (unknown_outcome, or any proxy's gateway timeout): the node
		// cannot know whether the write applied. Like a timeout, it may
		// take effect at any later time.
		r.Outcome, r.Err = history.Unknown, fmt.Sprintf("504 %s", body.Error)
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		r.Outcome, r.Err = history.Unknown, body.Error
	default:
		r.Outcome, r.Err = history.Fail, fmt.Sprintf("%d %s", resp.StatusCode, raw)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 && r.Outcome == history.Unknown {
		r.RetryAfter = s
	}
	return r
}

// reg makes one register access; it returns the version and whether the
// access was accepted.
func (c *Client) reg(op string, q register.Request) (int64, bool) {
	q.Op = c.nextID()
	e := history.Entry{Kind: "call", ID: q.Op, Client: c.cfg.ID, Op: op, Name: q.Name, Token: q.Token, Based: q.Based, Time: history.Now()}
	c.cfg.Journal.Write(e)
	b, _ := json.Marshal(q)
	path := "/read"
	if op == history.FWrite || op == history.UWrite {
		path = "/write"
	}
	r := history.Entry{Kind: "ret", ID: q.Op, Client: c.cfg.ID}
	resp, err := c.http.Post(c.cfg.Register+path, "application/json", bytes.NewReader(b))
	var out register.Response
	if err == nil {
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		r.Status, r.Version = resp.StatusCode, out.Version
		switch resp.StatusCode {
		case http.StatusOK:
			r.Outcome = history.OK
		case http.StatusConflict:
			r.Outcome = history.Rejected
		default:
			r.Outcome = history.Fail
		}
	} else {
		r.Outcome, r.Err = history.Unknown, err.Error()
	}
	r.Time = history.Now()
	c.cfg.Journal.Write(r)
	return r.Version, r.Outcome == history.OK
}

// Read is one journalled linearizable read of a lock, at a random node;
// the checker reads every lock right after a restore.
func (c *Client) Read(name string) { c.readOnce(name, false) }

// Call sends one journalled lock request (any body) to a random node; the
// checker uses it for its closing operations.
func (c *Client) Call(e history.Entry, path string, body any) history.Entry {
	return c.call(e, path, body)
}
