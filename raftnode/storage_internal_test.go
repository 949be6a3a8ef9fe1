package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

// fullDisk is a log store whose writes fail with ENOSPC, naming a file, once
// full is set: what bolt returns when the disk fills.
type fullDisk struct {
	raft.LogStore
	full *atomic.Bool
}

func (d fullDisk) err() error {
	return &fs.PathError{Op: "write", Path: "/secret/data/dir/raft.db", Err: syscall.ENOSPC}
}

func (d fullDisk) StoreLog(l *raft.Log) error {
	if d.full.Load() {
		return d.err()
	}
	return d.LogStore.StoreLog(l)
}

func (d fullDisk) StoreLogs(ls []*raft.Log) error {
	if d.full.Load() {
		return d.err()
	}
	return d.LogStore.StoreLogs(ls)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// On a full disk the write fails with ErrStorage, which names no path (the
// client must not see the server's files), and the node's log has the real
// error.
func TestFullDiskIsErrStorage(t *testing.T) {
	var full atomic.Bool
	var logs syncBuffer
	n := startSingle(t, Config{
		Logger:   hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}),
		wrapLogs: func(s raft.LogStore) raft.LogStore { return fullDisk{LogStore: s, full: &full} },
	})
	ctx := context.Background()
	acquire := fsm.Command{Op: fsm.OpAcquire, Name: "a", LeaseID: "lease-0123456789abcdef", TTL: 1000}
	if _, err := n.Apply(ctx, acquire); err != nil {
		t.Fatalf("acquire before the disk filled: %v", err)
	}
	full.Store(true)
	acquire.Name = "b"
	_, err := n.Apply(ctx, acquire)
	if !errors.Is(err, ErrStorage) {
		t.Fatalf("write on a full disk: %v, want ErrStorage", err)
	}
	if strings.Contains(err.Error(), "/secret") {
		t.Errorf("the error a client sees names the node's files: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "raft log store write failed") || !strings.Contains(l, "/secret/data/dir/raft.db") {
		t.Errorf("the node's log lacks the real error:\n%s", l)
	}
}

// trio runs three nodes on loopback; restart brings one back on its data dir.
type trio struct {
	t     *testing.T
	cfgs  map[string]Config
	nodes map[string]*Node
}

func startTrio(t *testing.T, base Config) *trio {
	return startTrioWith(t, base, nil, nil)
}

// startTrioWith is startTrio with two hooks: listened sees each node's Raft
// address once every listener is up (before any node starts), configure
// adjusts each node's config before it starts. Either may be nil.
func startTrioWith(t *testing.T, base Config, listened func(id, addr string), configure func(id string, cfg *Config)) *trio {
	t.Helper()
	tr := &trio{t: t, cfgs: map[string]Config{}, nodes: map[string]*Node{}}
	peers := map[string]string{}
	lns := map[string]net.Listener{}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("n%d", i)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[id], peers[id] = ln, ln.Addr().String()
		if listened != nil {
			listened(id, ln.Addr().String())
		}
	}
	for id, ln := range lns {
		cfg := base
		cfg.ID, cfg.DataDir, cfg.RaftAddr, cfg.Peers = id, t.TempDir(), ln.Addr().String(), peers
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
		cfg.Logger = hclog.NewNullLogger()
		if configure != nil {
			configure(id, &cfg)
		}
		tr.cfgs[id] = cfg
		cfg.RaftListener = ln
		tr.start(id, cfg)
	}
	t.Cleanup(func() {
		for _, n := range tr.nodes {
			n.Close()
		}
	})
	return tr
}

func (tr *trio) start(id string, cfg Config) {
	tr.t.Helper()
	n, err := New(cfg)
	if err != nil {
		tr.t.Fatalf("start %s: %v", id, err)
	}
	tr.nodes[id] = n
}

func (tr *trio) leader() *Node {
	tr.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, n := range tr.nodes {
			if n.IsLeader() && n.readyTerm.Load() == n.raft.CurrentTerm() {
				return n
			}
		}
		if time.Now().After(deadline) {
			tr.t.Fatal("no leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A follower far behind is not ready. Its own commit index stops at its last
// log entry, so after each batch of a long catch-up it would look caught up;
// it is not ready while more than ReadyMaxLag entries behind the commit index
// the leader told it.
func TestFollowerFarBehindIsNotReady(t *testing.T) {
	const lag = 100
	tr := startTrio(t, Config{ReadyMaxLag: lag})
	leader := tr.leader()
	var fid string
	for id, n := range tr.nodes {
		if n != leader {
			fid = id
		}
	}
	tr.nodes[fid].Close()
	delete(tr.nodes, fid)

	ctx := context.Background()
	for i := 0; i < 3*MaxAppendEntriesForTest+lag; i++ {
		cmd := fsm.Command{Op: fsm.OpAcquire, Name: fmt.Sprintf("l%d", i), LeaseID: "lease-0123456789abcdef", TTL: 600_000}
		if _, err := leader.Apply(ctx, cmd); err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
	}

	// The follower comes back; after its first batch of entries, the rest
	// are held back, as on a slow link or disk.
	release := make(chan struct{})
	var batches atomic.Int32
	cfg := tr.cfgs[fid]
	cfg.onAppend = func(req *raft.AppendEntriesRequest) {
		if len(req.Entries) > 0 && batches.Add(1) > 1 {
			<-release
		}
	}
	var ln net.Listener
	waitUntil(t, "the follower's port", func() bool {
		var err error
		ln, err = net.Listen("tcp", cfg.RaftAddr)
		return err == nil
	})
	cfg.RaftListener = ln
	tr.start(fid, cfg)
	f := tr.nodes[fid]
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	defer letGo()
	waitUntil(t, "the follower to apply its first batch", func() bool {
		id, _ := f.Leader()
		return id != "" && batches.Load() >= 1 && f.raft.CommitIndex() > f.startIndex && f.raft.AppliedIndex() >= f.raft.CommitIndex()
	})
	behind := leader.raft.CommitIndex() - f.raft.AppliedIndex()
	if behind <= lag {
		t.Fatalf("the follower is only %d behind; the test needs more than %d", behind, lag)
	}
	// By its own commit index the follower is caught up; by the leader's it is not.
	if f.Ready() {
		t.Fatalf("a follower %d entries behind the leader's commit index says ready", behind)
	}
	letGo()
	waitUntil(t, "the follower to catch up and be ready", f.Ready)
	if got := f.raft.AppliedIndex(); got+lag < leader.raft.CommitIndex() {
		t.Fatalf("ready at applied %d, leader commit %d", got, leader.raft.CommitIndex())
	}
}

// MaxAppendEntriesForTest is raft's batch size as the node configures it.
const MaxAppendEntriesForTest = 256
