package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/api"
)

// Defaults of the options.
const (
	DefaultDrift          = 0.01
	DefaultRequestTimeout = 10 * time.Second
	DefaultBackoffBase    = 50 * time.Millisecond
	DefaultBackoffMax     = 2 * time.Second
)

// Client talks to a raftlock cluster. It is safe for concurrent use; create
// one per process and Close it when done.
type Client struct {
	hc             *http.Client
	clock          Clock
	log            hclog.Logger
	drift          float64
	requestTimeout time.Duration
	backoffBase    time.Duration
	backoffMax     time.Duration
	tls            *tls.Config
	token          string
	owner          string // of leases and sessions whose options name none

	mu        sync.Mutex
	scheme    string
	endpoints []string             // base URLs, seeds first, then learned ones
	current   int                  // index in endpoints of the endpoint in use
	notBefore map[string]time.Time // endpoint -> do not send before (failures, Retry-After)
	leader    string               // leader's node id, "" if unknown
	addrs     map[string]string    // node id -> base URL
	lookedUp  map[string]bool      // leader ids whose address was looked up in /v1/cluster

	coalesce   bool
	coalescers map[string]*coalescer // endpoint -> its queue of calls
}

// WithCoalescing turns coalescing on or off (default on): with it, when
// calls of the lock cycle (an acquire that does not wait, a renew, a
// release) are made while a batch, or two lone calls, are under way with a
// node, they go to the node together in one POST /v1/batch, each answered
// as it would have been alone. It costs a lone call nothing and saves the nodes
// most of their work per call under load.
func WithCoalescing(on bool) Option { return func(c *Client) { c.coalesce = on } }

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client use hc instead of its own keep-alive
// client. Per-request timeouts come from contexts, so hc needs no Timeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTLSConfig makes the client speak https with cfg (RootCAs: the
// cluster's CA; Certificates: a client certificate, if the cluster asks for
// one). Endpoints given as host:port then mean https. Ignored with
// WithHTTPClient, whose transport is the caller's to configure.
func WithTLSConfig(cfg *tls.Config) Option { return func(c *Client) { c.tls = cfg } }

// WithToken sends "Authorization: Bearer token" with every request, for a
// cluster started with --auth-tokens.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithClock replaces the real clock, for tests that drive lease time.
func WithClock(clk Clock) Option { return func(c *Client) { c.clock = clk } }

// WithDrift sets the clock rate drift the lease deadline allows for:
// deadline = send time + TTL × (1 − drift). It must be in [0, 0.5); the
// default is DefaultDrift (1%).
func WithDrift(drift float64) Option { return func(c *Client) { c.drift = drift } }

// WithRequestTimeout bounds one attempt of a request (on top of the time a
// waiting acquire asks the server to wait). The caller's context bounds the
// whole call, retries included. Default DefaultRequestTimeout.
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.requestTimeout = d } }

// WithBackoff sets the jittered exponential backoff between retries: the
// n-th retry waits between half and all of min(base × 2ⁿ, max).
func WithBackoff(base, max time.Duration) Option {
	return func(c *Client) { c.backoffBase, c.backoffMax = base, max }
}

// WithOwner sets the owner of the leases and sessions whose options give
// none (AcquireOptions.Owner, SemaphoreOptions.Owner, SessionOptions.Owner;
// a session's lease takes its session's owner first). Without it the client
// uses the host name (os.Hostname), as the raftlock command line does, so
// that others see where a lock is held; WithOwner("") sends no owner.
func WithOwner(owner string) Option { return func(c *Client) { c.owner = owner } }

// WithLogger sets the logger (default: none). Retries and failovers are
// logged at debug level, lost leases at warn.
func WithLogger(l hclog.Logger) Option { return func(c *Client) { c.log = l } }

// New returns a client for the cluster that serves at endpoints, given as
// base URLs ("http://10.0.0.1:8001") or host:port. Any node of the cluster
// will do: the client learns the leader and the other nodes from the
// cluster's answers.
func New(endpoints []string, opts ...Option) (*Client, error) {
	c := &Client{
		clock:          realClock{},
		drift:          DefaultDrift,
		requestTimeout: DefaultRequestTimeout,
		backoffBase:    DefaultBackoffBase,
		backoffMax:     DefaultBackoffMax,
		notBefore:      map[string]time.Time{},
		addrs:          map[string]string{},
		lookedUp:       map[string]bool{},
		owner:          hostname(),
		coalesce:       true,
		coalescers:     map[string]*coalescer{},
	}
	for _, o := range opts {
		o(c)
	}
	if len(endpoints) == 0 {
		return nil, errors.New("raftlock: no endpoints given")
	}
	defScheme := "http"
	if c.tls != nil {
		defScheme = "https"
	}
	for _, ep := range endpoints {
		u, err := normalizeEndpoint(ep, defScheme)
		if err != nil {
			return nil, err
		}
		c.addEndpoint(u)
	}
	c.scheme, _, _ = strings.Cut(c.endpoints[0], "://")
	switch {
	case c.drift < 0 || c.drift >= 0.5:
		return nil, fmt.Errorf("raftlock: drift %v out of range [0, 0.5)", c.drift)
	case c.requestTimeout <= 0:
		return nil, errors.New("raftlock: request timeout must be positive")
	case c.backoffBase <= 0 || c.backoffMax < c.backoffBase:
		return nil, errors.New("raftlock: backoff needs 0 < base <= max")
	case c.clock == nil:
		return nil, errors.New("raftlock: nil clock")
	}
	if c.log == nil {
		c.log = hclog.NewNullLogger()
	}
	if c.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Services share one client across many goroutines: keep enough idle
		// connections that they are reused rather than re-dialled.
		t.MaxIdleConns, t.MaxIdleConnsPerHost = 256, 64
		if c.tls != nil {
			t.TLSClientConfig = c.tls.Clone()
		}
		c.hc = &http.Client{Transport: t}
	}
	return c, nil
}

// Close releases the idle keep-alive connections. It does not release any
// lease: call Release on them first.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// Leader returns the id of the leader as last reported by the cluster, or ""
// if it is not known.
func (c *Client) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// Endpoints returns the base URLs the client knows: the ones given to New,
// then the ones learned from the cluster.
func (c *Client) Endpoints() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.endpoints...)
}

func normalizeEndpoint(ep, scheme string) (string, error) {
	ep = strings.TrimSpace(ep)
	if !strings.Contains(ep, "://") {
		ep = scheme + "://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", fmt.Errorf("raftlock: bad endpoint %q: %w", ep, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("raftlock: bad endpoint %q: want http(s)://host:port", ep)
	}
	return u.Scheme + "://" + u.Host, nil
}

// addEndpoint appends u to the rotation unless it is there. c.mu held or not
// yet shared.
func (c *Client) addEndpoint(u string) {
	for _, e := range c.endpoints {
		if e == u {
			return
		}
	}
	c.endpoints = append(c.endpoints, u)
}

// route picks the endpoint for the next attempt: the leader when preferred
// and usable, else the first usable endpoint of the rotation. When every
// endpoint is held back (recent failure or Retry-After), it returns the one
// free soonest and how long to wait for it.
func (c *Client) route(preferLeader bool) (string, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if preferLeader && c.leader != "" {
		if a := c.addrs[c.leader]; a != "" && !now.Before(c.notBefore[a]) {
			return a, 0
		}
	}
	n := len(c.endpoints)
	best := ""
	for i := 0; i < n; i++ {
		j := (c.current + i) % n
		u := c.endpoints[j]
		nb := c.notBefore[u]
		if !now.Before(nb) {
			c.current = j
			return u, 0
		}
		if best == "" || nb.Before(c.notBefore[best]) {
			best = u
		}
	}
	return best, c.notBefore[best].Sub(now)
}

// penalize keeps u out of the rotation for d and moves on to the next
// endpoint. A failure to reach the leader also forgets who leads, so that the
// next answer from another node says who leads now.
func (c *Client) penalize(u string, d time.Duration, forgetLeader bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notBefore[u] = c.clock.Now().Add(d)
	if forgetLeader && c.leader != "" && c.addrs[c.leader] == u {
		c.leader = ""
	}
	if c.endpoints[c.current] == u {
		c.current = (c.current + 1) % len(c.endpoints)
	}
}

// observe learns from the headers of an answer from u.
func (c *Client) observe(u string, h http.Header, status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if node := h.Get(api.HeaderNode); node != "" {
		c.addrs[node] = u
	}
	if l := h.Get(api.HeaderLeader); l != "" {
		c.leader = l
	} else if status == http.StatusServiceUnavailable {
		c.leader = ""
	}
}

// learnCluster records the nodes' HTTP addresses from a /v1/cluster answer.
// An address seen answering (observe) wins over an advertised one.
func (c *Client) learnCluster(cs *ClusterStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range cs.Nodes {
		if n.ID == "" || n.HTTPAddr == "" {
			continue
		}
		u, err := normalizeEndpoint(n.HTTPAddr, c.scheme)
		if err != nil {
			continue
		}
		if c.addrs[n.ID] == "" {
			c.addrs[n.ID] = u
		}
		c.addEndpoint(u)
	}
	if cs.Leader != "" {
		c.leader = cs.Leader
	}
}

// needLeaderLookup reports whether the leader is known by id only and its
// address has not been looked up yet (once per leader id).
func (c *Client) needLeaderLookup() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader == "" || c.addrs[c.leader] != "" || c.lookedUp[c.leader] {
		return false
	}
	c.lookedUp[c.leader] = true
	return true
}

// hostname is the default owner: this host's name, "" when unknown.
func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}
