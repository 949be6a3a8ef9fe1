package raftnode

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// startNodes is the one starter of raftnode's internal tests, which cannot
// use internal/testenv (it imports this package) and need unexported Config
// fields: it starts size nodes of one cluster, "n1".."nN", on loopback, each
// with its own temp data dir. Unless base sets them it uses internal/testenv's
// short timings (heartbeat and election 100 ms, leader lease 50 ms) and a
// null logger. listened sees each node's Raft address once every listener is
// up, before any node starts; configure adjusts each node's config before it
// starts; either may be nil. The nodes are closed when the test ends. It
// returns them and their configs (without the listener, ready for a
// restart on the same data dir).
func startNodes(t *testing.T, size int, base Config, listened func(id, addr string), configure func(id string, cfg *Config)) (map[string]*Node, map[string]Config) {
	t.Helper()
	nodes, cfgs := map[string]*Node{}, map[string]Config{}
	peers := map[string]string{}
	lns, dirs := map[string]net.Listener{}, map[string]string{}
	for i := 1; i <= size; i++ {
		id := fmt.Sprintf("n%d", i)
		dirs[id] = t.TempDir() // before the Close below is registered, so removed after it runs
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[id], peers[id] = ln, ln.Addr().String()
		if listened != nil {
			listened(id, ln.Addr().String())
		}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	for id, ln := range lns {
		cfg := base
		cfg.ID, cfg.DataDir, cfg.RaftAddr, cfg.Peers = id, dirs[id], ln.Addr().String(), peers
		if cfg.HeartbeatTimeout == 0 {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
		}
		if cfg.Logger == nil {
			cfg.Logger = hclog.NewNullLogger()
		}
		if configure != nil {
			configure(id, &cfg)
		}
		cfgs[id] = cfg
		cfg.RaftListener = ln
		n, err := New(cfg)
		if err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		nodes[id] = n
	}
	return nodes, cfgs
}
