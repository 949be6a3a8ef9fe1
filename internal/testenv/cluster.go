// Package testenv is raftlock's one test-support layer: every package's
// cluster tests start their nodes through it, and every real-process test
// gets its binary and its processes through it.
//
//   - In-process clusters (Start): real nodes on loopback, each the full
//     stack (raftnode + httpapi) in the test process, with temp data dirs,
//     free ports, short election timeouts and logs sent to t.Log; Raft
//     partitions (Partition, Heal), a manual lease clock (ManualClock), TLS
//     and tokens by Options. Tests that need raftnode's unexported hooks wrap
//     raftnode.Config themselves but keep these timings.
//   - Real processes (Binary, StartServe, StartProcs): `raftlock serve` run
//     as an operator runs it, on the binary procs.Binary builds once per
//     test process (RAFTLOCK_BIN skips the build). Binary skips the test
//     under -short, so no process test can forget the skip; files holding
//     such tests end in _proc_test.go.
//   - Waiting and ports (WaitFor, Context, FreePorts, Listen): poll with a
//     deadline, never sleep-and-hope; bind loopback ports below the
//     ephemeral range.
//
// The subpackages are procs, the process runner without the testing package
// (the checker binary uses it too), and contract, the tests of the HTTP
// contract (docs/openapi.yaml, docs/API.md) against a real cluster.
package testenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftlock/raftlock/httpapi"
	"github.com/raftlock/raftlock/internal/testenv/procs"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/raftnode/tlsconfig"
	"github.com/raftlock/raftlock/raftnode/tlsconfig/tlstest"
)

// Options tune a test cluster.
type Options struct {
	// Clock, when set, is shared by every node: tests move lease time by hand.
	Clock raftnode.Clock
	// Snapshot settings; zero keeps raftnode's defaults.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// Configure, when set, may change each node's config before it starts.
	Configure func(*raftnode.Config)
	// TLS, when set, secures every node with a certificate from this CA:
	// HTTPS for the API and forwarding, mutual TLS for Raft.
	TLS *tlstest.CA
	// Tokens, when set, is the token file (httpapi.ParseTokens) every node
	// enforces; nodes join and announce with its first admin token.
	Tokens string
}

// Cluster is a set of nodes that bootstrapped together.
type Cluster struct {
	t     testing.TB
	opts  Options
	net   *network
	Nodes []*Node
}

// Node is one running (or stopped) member.
type Node struct {
	ID       string
	HTTPAddr string
	RaftAddr string
	DataDir  string
	*raftnode.Node

	cluster *Cluster
	tls     *tlsconfig.Bundle // nil without Options.TLS
	srv     *http.Server
	running bool
	// Listeners bound before any node starts, so that no outbound
	// connection can take a port meant for a node; used on first start.
	httpLn, raftLn net.Listener
}

func newNode(c *Cluster, id string) *Node {
	n := &Node{ID: id, DataDir: c.t.TempDir(), cluster: c, httpLn: listen(c.t), raftLn: listen(c.t)}
	n.HTTPAddr, n.RaftAddr = n.httpLn.Addr().String(), n.raftLn.Addr().String()
	c.net.mu.Lock()
	c.net.ids[n.RaftAddr] = id
	c.net.mu.Unlock()
	if c.opts.TLS != nil {
		n.tls = c.opts.TLS.Bundle(id)
	}
	return n
}

// URL is the node's HTTP endpoint (https with Options.TLS).
func (n *Node) URL() string {
	if n.tls != nil {
		return "https://" + n.HTTPAddr
	}
	return "http://" + n.HTTPAddr
}

// ClientTLS returns a client config that trusts the cluster's CA, nil for a
// cluster without TLS.
func (c *Cluster) ClientTLS() *tls.Config {
	if c.opts.TLS == nil {
		return nil
	}
	return c.opts.TLS.Bundle("").Client()
}

// HTTPClient returns an HTTP client for the cluster's nodes (it trusts the
// CA when the cluster has TLS).
func (c *Cluster) HTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = c.ClientTLS()
	c.t.Cleanup(t.CloseIdleConnections)
	return &http.Client{Transport: t}
}

// Running reports whether the node has been started and not stopped.
func (n *Node) Running() bool { return n.running }

// Start starts an n-node cluster and waits until it has a leader. The
// cluster is shut down when the test ends.
func Start(t testing.TB, n int, opts ...Options) *Cluster {
	t.Helper()
	c := &Cluster{t: t, net: newNetwork()}
	if len(opts) > 0 {
		c.opts = opts[0]
	}
	peers := map[string]string{}
	for i := 1; i <= n; i++ {
		node := newNode(c, fmt.Sprintf("n%d", i))
		peers[node.ID] = node.RaftAddr
		c.Nodes = append(c.Nodes, node)
	}
	for _, node := range c.Nodes {
		node.start(peers, "")
	}
	t.Cleanup(c.Close)
	c.Leader()
	return c
}

// AddNode starts a fresh node that joins the cluster through joinURL.
func (c *Cluster) AddNode(joinURL string) *Node {
	c.t.Helper()
	node := newNode(c, fmt.Sprintf("n%d", len(c.Nodes)+1))
	c.Nodes = append(c.Nodes, node)
	node.start(nil, joinURL)
	return node
}

func (n *Node) start(peers map[string]string, join string) {
	t := n.cluster.t
	t.Helper()
	// Raft's timing is the production defaults' divided by five, so that
	// elections and ticks come quickly; CommitTimeout too, so that the
	// followers learn each tick's commit well before the next tick (with
	// production's 50ms against ticks every 50ms they would always trail
	// the leader by one entry, and replicas would never be seen equal).
	cfg := raftnode.Config{
		ID: n.ID, DataDir: n.DataDir, RaftAddr: n.RaftAddr, AdvertiseHTTP: n.HTTPAddr,
		Peers: peers, Join: join,
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, TickInterval: 50 * time.Millisecond,
		CommitTimeout:     10 * time.Millisecond,
		SnapshotThreshold: n.cluster.opts.SnapshotThreshold, TrailingLogs: n.cluster.opts.TrailingLogs,
		SnapshotInterval: 100 * time.Millisecond,
		Clock:            n.cluster.opts.Clock,
		RaftDial:         n.cluster.net.dialer(n.ID),
		Logger:           testLogger(t, n.ID),
	}
	apiOpts := httpapi.Options{LeaderWait: time.Second}
	// The node's own calls to other nodes' API (join, announce, progress).
	var apiTLS *tls.Config
	var apiToken string
	if n.tls != nil {
		cfg.RaftTLS, apiTLS = n.tls.Peer(), n.tls.Client()
		apiOpts.ForwardTLS = n.tls.Client()
	}
	if n.cluster.opts.Tokens != "" {
		toks, err := httpapi.ParseTokens(strings.NewReader(n.cluster.opts.Tokens))
		if err != nil {
			t.Fatalf("tokens: %v", err)
		}
		apiOpts.Tokens, apiToken = toks, toks.AdminToken()
	}
	// As cmd/raftlock serve wires them; Configure may replace them.
	cfg.Announce = httpapi.Joiner(apiTLS, apiToken)
	cfg.FetchProgress = httpapi.ProgressFetcher(apiTLS, apiToken)
	if n.cluster.opts.Configure != nil {
		n.cluster.opts.Configure(&cfg)
	}
	apiOpts.Logger = cfg.Logger
	ln, raftLn := n.httpLn, n.raftLn
	n.httpLn, n.raftLn = nil, nil
	var err error
	if ln == nil { // a restart: the ports were ours; after a stop they may linger briefly
		waitFor(t, 5*time.Second, "listen on "+n.HTTPAddr, func() bool {
			ln, err = net.Listen("tcp", n.HTTPAddr)
			return err == nil
		})
		waitFor(t, 5*time.Second, "listen on "+n.RaftAddr, func() bool {
			raftLn, err = net.Listen("tcp", n.RaftAddr)
			return err == nil
		})
	}
	cfg.RaftListener = raftLn
	node, err := raftnode.New(cfg)
	if err != nil {
		ln.Close()
		t.Fatalf("start node %s: %v", n.ID, err)
	}
	n.Node = node
	reg := prometheus.NewRegistry()
	reg.MustRegister(node.Collectors()...)
	apiOpts.Registry = reg
	n.srv = &http.Server{Handler: httpapi.New(node, apiOpts)}
	if n.tls != nil {
		n.srv.TLSConfig = n.tls.Server(false)
		go n.srv.ServeTLS(ln, "", "")
	} else {
		go n.srv.Serve(ln)
	}
	n.running = true
}

// Stop shuts the node down gracefully (a leader hands over leadership).
func (n *Node) Stop() {
	if !n.running {
		return
	}
	n.running = false
	n.srv.Close()
	n.Node.Shutdown()
}

// Kill stops the node at once, as kill -9 would: no leadership hand-over.
func (n *Node) Kill() {
	if !n.running {
		return
	}
	n.running = false
	n.srv.Close()
	n.Node.Close()
}

// Restart starts a stopped node again from its data dir.
func (n *Node) Restart() {
	n.cluster.t.Helper()
	if n.running {
		n.Kill()
	}
	n.start(nil, "")
}

// Close stops every node.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

// Endpoints returns the HTTP URLs of the running nodes.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, n := range c.Nodes {
		if n.running {
			out = append(out, n.URL())
		}
	}
	return out
}

// Leader waits until exactly one running node leads and has published its
// HTTP address, and returns it.
func (c *Cluster) Leader() *Node {
	c.t.Helper()
	return c.WaitForNewLeader(nil)
}

// WaitForNewLeader waits for a leader other than old (nil: any leader) that
// every running node agrees on, but for nodes a partition cuts off from it.
func (c *Cluster) WaitForNewLeader(old *Node) *Node {
	c.t.Helper()
	var leader *Node
	waitFor(c.t, 15*time.Second, "a leader", func() bool {
		leader = nil
		for _, n := range c.Nodes {
			if !n.running || !n.IsLeader() {
				continue
			}
			if leader != nil {
				return false // two claim it: wait until one steps down
			}
			leader = n
		}
		if leader == nil || leader == old {
			return false
		}
		for _, n := range c.Nodes {
			if !n.running || !c.reaches(n, leader) {
				continue
			}
			if id, addr := n.Leader(); id != leader.ID || addr == "" {
				return false
			}
		}
		return true
	})
	return leader
}

// Followers returns the running nodes that do not lead.
func (c *Cluster) Followers() []*Node {
	c.t.Helper()
	leader := c.Leader()
	var out []*Node
	for _, n := range c.Nodes {
		if n.running && n != leader {
			out = append(out, n)
		}
	}
	return out
}

// WaitApplied waits until every running node has applied index.
func (c *Cluster) WaitApplied(index uint64) {
	c.t.Helper()
	waitFor(c.t, 15*time.Second, fmt.Sprintf("all nodes to apply index %d", index), func() bool {
		for _, n := range c.Nodes {
			if n.running && !n.AppliedThrough(index) {
				return false
			}
		}
		return true
	})
}

// WaitFor polls cond every few milliseconds until it holds, failing the test
// after timeout. Tests wait on conditions, never on sleeps.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	waitFor(t, timeout, what, cond)
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// listen binds a loopback port below the kernel's ephemeral range (32768
// and up), so that no outbound connection can hold it when a restarted node
// binds it again.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln := Listen(t)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Listen binds a free loopback port below the kernel's ephemeral range; the
// caller closes it. The picker is procs.Listen, shared with the checker.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := procs.Listen()
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// FreePorts returns n distinct loopback ports that were free a moment ago,
// below the ephemeral range, for processes the test starts itself.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := procs.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// testLogger sends a node's logs to t.Log, so they show only when a test
// fails, and drops lines that arrive after the test ended.
func testLogger(t testing.TB, id string) hclog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return hclog.New(&hclog.LoggerOptions{Name: id, Output: w, Level: hclog.Info, DisableTime: false})
}

type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.mu.Lock()
		w.t.Log(string(p[:len(p)-1]))
		w.mu.Unlock()
	}
	return len(p), nil
}

// ManualClock is a raftnode.Clock that moves only when the test says so.
type ManualClock struct {
	mu      sync.Mutex
	now     int64
	waiters []manualWaiter
}

type manualWaiter struct {
	at int64
	ch chan time.Time
}

// Now returns the clock's reading.
func (c *ManualClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After fires once the clock has been advanced by d.
func (c *ManualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- time.Time{}
		return ch
	}
	c.waiters = append(c.waiters, manualWaiter{c.now + int64(d), ch})
	return ch
}

// Advance moves the clock forward and fires the timers that fell due.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now += int64(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at <= c.now {
			w.ch <- time.Time{}
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// Ensure the helper matches the API's expectations at compile time.
var (
	_ httpapi.Store    = (*raftnode.Node)(nil)
	_ httpapi.Gatherer = (*raftnode.Node)(nil)
)

// Context returns a context bounded by d, cancelled when the test ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// EnvInt is the integer in the environment variable key, or def when it is
// unset: how the long benchmarks take their sizes.
func EnvInt(tb testing.TB, key string, def int) int {
	tb.Helper()
	if v := os.Getenv(key); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			tb.Fatalf("%s=%q: %v", key, v, err)
		}
		return n
	}
	return def
}
