// Package workload is one workload client: a separate process (the checker
// re-executes itself as "raftlock-check client") that loops acquire, hold
// (renewing, or overrunning its lease on purpose), read-modify-write of the
// fenced and unfenced registers, release, and now and then a linearizable
// read. It talks raw HTTP so that every call is journalled exactly: a "call"
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
	Journal  *history.Journal
}

// Client runs the loop.
type Client struct {
	cfg  Config
	rnd  *rand.Rand
	http *http.Client
	seq  int
}

// New makes a client.
func New(cfg Config) *Client {
	t := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 500 * time.Millisecond}).DialContext,
		MaxIdleConnsPerHost: 4,
	}
	return &Client{cfg: cfg, rnd: rand.New(rand.NewSource(cfg.Seed)), http: &http.Client{Transport: t, Timeout: cfg.Timeout}}
}

func (c *Client) owner() string { return fmt.Sprintf("c%d", c.cfg.ID) }

func (c *Client) nextID() string {
	c.seq++
	return fmt.Sprintf("c%d-%d", c.cfg.ID, c.seq)
}

// Run loops until ctx ends.
func (c *Client) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if c.rnd.Intn(10) == 0 {
			c.read(c.cfg.Locks[c.rnd.Intn(len(c.cfg.Locks))])
		}
		c.cycle(ctx)
	}
}

func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// cycle is one acquire, hold, write, release.
func (c *Client) cycle(ctx context.Context) {
	name := c.cfg.Locks[c.rnd.Intn(len(c.cfg.Locks))]
	ttl := int64(1000 + c.rnd.Intn(2001))
	lease := fmt.Sprintf("c%02d-%06d-%08x", c.cfg.ID, c.seq+1, c.rnd.Uint32())
	var tok uint64
	for try := 0; try < 4; try++ { // an unknown outcome is retried with the same lease id
		e := c.call(history.Entry{Op: history.Acquire, Name: name, Lease: lease, TTL: ttl}, "/v1/locks/acquire",
			map[string]any{"name": name, "owner": c.owner(), "ttl_ms": ttl, "lease_id": lease})
		if e.Outcome == history.OK {
			tok = e.Token
			break
		}
		if e.Outcome == history.Held {
			break
		}
		if !c.sleep(ctx, time.Duration(50+c.rnd.Intn(100))*time.Millisecond) {
			break
		}
	}
	if tok == 0 {
		c.sleep(ctx, time.Duration(20+c.rnd.Intn(130))*time.Millisecond)
		return
	}
	fv, fok := c.reg(history.FRead, register.Request{Fenced: true, Name: name, Token: tok})
	uv, _ := c.reg(history.URead, register.Request{Name: name, Token: tok})
	t := time.Duration(ttl) * time.Millisecond
	if c.cfg.Renew {
		hold := time.Duration(float64(t) * (0.5 + 1.5*c.rnd.Float64()))
		end := time.Now().Add(hold)
		for time.Now().Before(end) {
			if !c.sleep(ctx, min(t/3, time.Until(end))) {
				break
			}
			if time.Now().After(end) {
				break
			}
			e := c.call(history.Entry{Op: history.Renew, Name: name, Lease: lease, TTL: ttl}, "/v1/locks/renew",
				map[string]any{"name": name, "lease_id": lease})
			if e.Outcome != history.OK {
				break
			}
		}
	} else {
		c.sleep(ctx, time.Duration(float64(t)*(0.3+1.4*c.rnd.Float64())))
	}
	// Write whatever happened meanwhile: a client that overran its lease or
	// was paused writes with its old token, as real ones do.
	if fok {
		c.reg(history.FWrite, register.Request{Fenced: true, Name: name, Token: tok, Based: fv})
	}
	c.reg(history.UWrite, register.Request{Name: name, Token: tok, Based: uv})
	c.call(history.Entry{Op: history.Release, Name: name, Lease: lease}, "/v1/locks/release",
		map[string]any{"name": name, "lease_id": lease})
}

// call sends one lock request to a random node, journalling it.
func (c *Client) call(e history.Entry, path string, body any) history.Entry {
	node := c.cfg.Nodes[c.rnd.Intn(len(c.cfg.Nodes))]
	b, _ := json.Marshal(body)
	e.Kind, e.ID, e.Client, e.Node = "call", c.nextID(), c.cfg.ID, node
	e.Time = history.Now()
	c.cfg.Journal.Write(e)
	resp, err := c.http.Post(node+path, "application/json", bytes.NewReader(b))
	r := c.classify(resp, err)
	r.ID, r.Client = e.ID, e.Client
	c.cfg.Journal.Write(r)
	return r
}

func (c *Client) read(name string) {
	node := c.cfg.Nodes[c.rnd.Intn(len(c.cfg.Nodes))]
	e := history.Entry{Kind: "call", ID: c.nextID(), Client: c.cfg.ID, Op: history.Read, Name: name, Node: node, Time: history.Now()}
	c.cfg.Journal.Write(e)
	resp, err := c.http.Get(node + "/v1/locks/" + url.PathEscape(name))
	r := c.classify(resp, err)
	r.ID, r.Client = e.ID, e.Client
	c.cfg.Journal.Write(r)
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
	}
	jerr := json.Unmarshal(raw, &body)
	switch {
	case rerr != nil || (resp.StatusCode < 300 && jerr != nil):
		r.Outcome, r.Err = history.Unknown, fmt.Sprint("reading the answer: ", rerr, jerr)
	case resp.StatusCode == http.StatusOK:
		r.Outcome, r.Token = history.OK, body.Token
		if body.Held != nil && !*body.Held {
			r.Outcome = history.Free
		}
	case resp.StatusCode == http.StatusConflict && body.Error == "held":
		r.Outcome, r.Holder = history.Held, body.Holder.Token
	case resp.StatusCode == http.StatusConflict && body.Error == "not_holder":
		r.Outcome = history.NotHolder
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		r.Outcome, r.Err = history.Unknown, body.Error
	default:
		r.Outcome, r.Err = history.Fail, fmt.Sprintf("%d %s", resp.StatusCode, raw)
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

// Call sends one journalled lock request (any body) to a random node; the
// checker uses it for its closing operations.
func (c *Client) Call(e history.Entry, path string, body any) history.Entry {
	return c.call(e, path, body)
}
