package testenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// network is the cluster's Raft network: every node dials its peers through
// it (raftnode.Config.RaftDial), so a test can cut links between nodes.
// Only Raft traffic is cut; the HTTP API stays reachable, as a test needs to
// ask a cut-off node what it thinks.
type network struct {
	mu    sync.Mutex
	ids   map[string]string // Raft address -> node id
	far   map[string]bool   // ids on the far side of a partition; empty: healed
	links map[*link]struct{}
}

// link is one Raft connection, from the dialing node to the accepting one.
type link struct {
	net.Conn
	nw       *network
	from, to string
	once     sync.Once
}

func (l *link) Close() error {
	l.once.Do(func() {
		l.nw.mu.Lock()
		delete(l.nw.links, l)
		l.nw.mu.Unlock()
	})
	return l.Conn.Close()
}

func newNetwork() *network {
	return &network{ids: map[string]string{}, far: map[string]bool{}, links: map[*link]struct{}{}}
}

// cut reports whether a and b are on different sides. Caller holds mu.
func (nw *network) cut(a, b string) bool { return nw.far[a] != nw.far[b] }

// dialer returns node id's Raft dial function.
func (nw *network) dialer(id string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		nw.mu.Lock()
		to := nw.ids[addr]
		refused := nw.cut(id, to)
		nw.mu.Unlock()
		if refused {
			return nil, fmt.Errorf("testenv: %s -> %s (%s): partitioned", id, to, addr)
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		l := &link{Conn: c, nw: nw, from: id, to: to}
		nw.mu.Lock()
		defer nw.mu.Unlock()
		if nw.cut(id, to) { // partitioned while dialing
			c.Close()
			return nil, fmt.Errorf("testenv: %s -> %s (%s): partitioned", id, to, addr)
		}
		nw.links[l] = struct{}{}
		return l, nil
	}
}

// Partition cuts the given nodes off from the others: no Raft connection
// between the two sides can be made, and the open ones are closed. The
// given nodes still reach each other. Heal undoes it.
func (c *Cluster) Partition(nodes ...*Node) {
	nw := c.net
	nw.mu.Lock()
	nw.far = map[string]bool{}
	for _, n := range nodes {
		nw.far[n.ID] = true
	}
	var doomed []*link
	for l := range nw.links {
		if nw.cut(l.from, l.to) {
			doomed = append(doomed, l)
		}
	}
	nw.mu.Unlock()
	for _, l := range doomed {
		l.Close()
	}
}

// Heal joins the sides of a partition again.
func (c *Cluster) Heal() {
	c.net.mu.Lock()
	c.net.far = map[string]bool{}
	c.net.mu.Unlock()
}

// reaches reports whether Raft traffic flows between a and b.
func (c *Cluster) reaches(a, b *Node) bool {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	return !c.net.cut(a.ID, b.ID)
}

// EnsureSame waits until every running node has applied the same last
// Raft index and holds byte-identical state (the snapshot encoding of the
// state machine is deterministic), and fails the test if they do not
// converge within 10 s. The leader's tick loop may still be writing, so it
// polls for a moment when all agree.
func (c *Cluster) EnsureSame(t testing.TB) {
	t.Helper()
	var last string
	deadline := time.Now().Add(10 * time.Second)
	for {
		same, report := c.compare(t)
		if same {
			return
		}
		last = report
		if time.Now().After(deadline) {
			t.Fatalf("nodes did not converge to the same state within 10s:\n%s", last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// compare takes every running node's applied index and state bytes, and
// says whether they all agree, with a per-node report for a failure.
func (c *Cluster) compare(t testing.TB) (bool, string) {
	type view struct {
		id             string
		applied, index uint64
		state          []byte
	}
	var views []view
	for _, n := range c.Nodes {
		if !n.running {
			continue
		}
		var buf bytes.Buffer
		s := n.Machine().Snapshot()
		views = append(views, view{n.ID, n.Raft().AppliedIndex(), n.Machine().Clock().Index, nil})
		if _, err := s.WriteTo(&buf); err != nil {
			t.Fatalf("%s: encode state: %v", n.ID, err)
		}
		views[len(views)-1].state = buf.Bytes()
	}
	same := true
	var b strings.Builder
	for _, v := range views {
		if v.applied != views[0].applied || !bytes.Equal(v.state, views[0].state) {
			same = false
		}
		fmt.Fprintf(&b, "  %s: applied %d, fsm index %d, state sha256 %x (%d bytes)\n",
			v.id, v.applied, v.index, sha256.Sum256(v.state), len(v.state))
	}
	return same, b.String()
}
