// Package raftnode wires the lock state machine to hashicorp/raft: the
// BoltDB log and stable store, file snapshots, the TCP transport, bootstrap
// and membership, and the leader's clock ticks. It knows nothing of HTTP
// handlers; the httpapi package talks to it through a small interface.
package raftnode

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/raftlock/raftlock/fsm"
	"go.etcd.io/bbolt"
)

// Node is one member of a raftlock cluster.
type Node struct {
	cfg       Config
	log       hclog.Logger
	clock     Clock
	machine   *fsm.Machine
	raft      *raft.Raft
	transport *raft.NetworkTransport
	store     *raftboltdb.BoltStore
	logs      raft.LogStore
	fsm       *raftFSM

	notifyCh chan bool     // leadership changes, buffered so Raft never blocks
	changed  chan struct{} // wakes the leader loop after a grant; buffered 1
	// readyTerm is the term in which this node, as leader, finished its
	// Barrier: only then do its reads see every committed entry.
	readyTerm atomic.Uint64
	// startIndex is the last log index found on disk at start; see Ready.
	startIndex uint64
	observers  []Observer
	waiters    *waitQueue
	metrics    *nodeMetrics
	pending    chan struct{} // admission slots for client writes; see applyAdmitted

	httpc    *http.Client
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// Observer is told of every applied command on Raft's FSM goroutine. It must
// not block: metrics and the waiter queue hand work elsewhere.
type Observer func(index uint64, op fsm.Op, r fsm.Result)

// New opens (or creates) the node's data dir, starts Raft and, on a fresh
// data dir, bootstraps from cfg.Peers or joins through cfg.Join.
func New(cfg Config, observers ...Observer) (*Node, error) {
	cfg.setDefaults()
	if cfg.ID == "" {
		return nil, errors.New("raftnode: node id is required")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	n := &Node{
		cfg:       cfg,
		log:       cfg.Logger.Named("raftnode"),
		clock:     cfg.Clock,
		machine:   fsm.New(),
		notifyCh:  make(chan bool, 16),
		changed:   make(chan struct{}, 1),
		observers: observers,
		httpc:     &http.Client{Timeout: 5 * time.Second},
		stop:      make(chan struct{}),
		pending:   make(chan struct{}, cfg.MaxPendingApplies),
	}
	n.metrics = newNodeMetrics(n)
	n.waiters = newWaitQueue(n.apply, n.machine.Get, cfg.MaxWaitersPerLock, cfg.MaxWaiters)
	if err := n.open(); err != nil {
		n.closeStores()
		return nil, err
	}
	n.wg.Add(2)
	go n.watchLeadership()
	go n.register()
	return n, nil
}

func (n *Node) open() error {
	cfg := n.cfg
	store, err := raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(cfg.DataDir, "raft.db"),
		BoltOptions: &bbolt.Options{
			Timeout:        time.Second, // another process holds the data dir: fail, do not hang
			NoFreelistSync: true,        // as Consul does: less written per commit, rebuilt on open
			FreelistType:   bbolt.FreelistMapType,
		},
	})
	if err != nil {
		return fmt.Errorf("open raft store in %s: %w", cfg.DataDir, err)
	}
	n.store = store
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, cfg.Logger.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("open snapshot store: %w", err)
	}
	if n.transport, err = newTransport(cfg); err != nil {
		return err
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = cfg.Logger.Named("raft")
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.NotifyCh = n.notifyCh
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256

	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		return fmt.Errorf("inspect data dir: %w", err)
	}
	logs, err := raft.NewLogCache(1024, store)
	if err != nil {
		return fmt.Errorf("log cache: %w", err)
	}
	n.fsm = &raftFSM{m: n.machine, applied: n.onApplied}
	n.logs = logs
	n.raft, err = raft.NewRaft(rc, n.fsm, logs, store, snaps, n.transport)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	if existing {
		n.startIndex = n.raft.LastIndex()
		n.log.Info("recovering from data dir", "dir", cfg.DataDir, "last_index", n.startIndex)
		return nil
	}
	if len(cfg.Peers) > 0 {
		var servers []raft.Server
		for id, addr := range cfg.Peers {
			servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
		}
		n.log.Info("bootstrapping cluster", "voters", len(servers))
		if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	return nil
}

// onApplied runs on Raft's FSM goroutine after each command.
func (n *Node) onApplied(index uint64, op fsm.Op, r fsm.Result) {
	if op == fsm.OpAcquire && r.Status == fsm.StatusOK {
		select {
		case n.changed <- struct{}{}:
		default:
		}
	}
	n.metrics.applied(op, r)
	n.waiters.freed(r.Freed)
	for _, o := range n.observers {
		o(index, op, r)
	}
}

// ID returns this node's id.
func (n *Node) ID() string { return n.cfg.ID }

// Machine returns the local state machine, as of the last applied entry.
func (n *Node) Machine() *fsm.Machine { return n.machine }

// Raft exposes the underlying Raft instance for stats and tests.
func (n *Node) Raft() *raft.Raft { return n.raft }

// IsLeader reports whether this node currently leads.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the leader's id and HTTP address, empty when unknown.
func (n *Node) Leader() (id, httpAddr string) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	addr, _ := n.machine.NodeAddr(string(lid))
	return string(lid), addr
}

// WaitForLeader polls until a leader with a known HTTP address exists or ctx ends.
func (n *Node) WaitForLeader(ctx context.Context) (id, httpAddr string, err error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if id, addr := n.Leader(); id != "" && (addr != "" || id == n.cfg.ID) {
			return id, addr, nil
		}
		select {
		case <-ctx.Done():
			return "", "", ErrNoLeader
		case <-n.stop:
			return "", "", ErrShutdown
		case <-t.C:
		}
	}
}

// Ready reports whether a leader is known and this node has applied the log
// up to the commit index it last heard of. A restarted node hears no commit
// index from heartbeats (its own starts at 0), so it also waits until it has
// applied what its log held when it started: until then its state is older
// than what it served before the restart.
func (n *Node) Ready() bool {
	if id, _ := n.Leader(); id == "" {
		return false
	}
	commit := n.raft.CommitIndex()
	return commit > 0 && n.AppliedThrough(max(commit, n.startIndex))
}

// Apply proposes one lock command (acquire, renew or release) and returns
// the state machine's outcome once the entry is committed on a quorum and
// applied here. Only the leader can; others return ErrNotLeader.
func (n *Node) Apply(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	switch cmd.Op {
	case fsm.OpAcquire, fsm.OpRenew, fsm.OpRelease:
	default:
		return fsm.Result{}, fmt.Errorf("raftnode: %v is not a lock command", cmd.Op)
	}
	if err := ctx.Err(); err != nil {
		return fsm.Result{}, err
	}
	if !n.IsLeader() {
		return fsm.Result{}, ErrNotLeader
	}
	if cmd.Op == fsm.OpAcquire {
		return n.Acquire(ctx, cmd, 0)
	}
	return n.applyAdmitted(cmd)
}

// applyAdmitted applies a client's command if the bounded queue in front of
// Raft has room, and sheds it at once with ErrOverloaded otherwise: under
// overload, fast refusals keep the latency of accepted writes bounded where
// queueing would grow it without limit. The leader's own entries (ticks,
// grants to parked waiters) bypass the bound; they must never be shed.
func (n *Node) applyAdmitted(cmd fsm.Command) (fsm.Result, error) {
	select {
	case n.pending <- struct{}{}:
	default:
		return fsm.Result{}, ErrOverloaded
	}
	defer func() { <-n.pending }()
	return n.apply(cmd)
}

// Acquire proposes an acquire. When the lock is held and wait > 0, the
// request parks on this leader and is granted in arrival order as the lock
// frees; after wait it gets the held answer. An acquire that does not wait
// never jumps ahead of parked ones.
func (n *Node) Acquire(ctx context.Context, cmd fsm.Command, wait time.Duration) (fsm.Result, error) {
	if cmd.Op != fsm.OpAcquire {
		return fsm.Result{}, fmt.Errorf("raftnode: %v is not an acquire", cmd.Op)
	}
	if err := ctx.Err(); err != nil {
		return fsm.Result{}, err
	}
	if !n.IsLeader() {
		return fsm.Result{}, ErrNotLeader
	}
	if cmd.LeaseID == "" {
		cmd.LeaseID = NewLeaseID()
	}
	if held, ok := n.heldHere(cmd); ok {
		if err := n.raft.VerifyLeader().Error(); err != nil {
			return fsm.Result{}, raftError("verify leader", err)
		}
		if wait <= 0 {
			return held, nil
		}
		return n.waiters.wait(ctx, cmd, held, wait)
	}
	r, err := n.applyAdmitted(cmd)
	if err != nil || r.Status != fsm.StatusHeld || wait <= 0 {
		return r, err
	}
	return n.waiters.wait(ctx, cmd, r, wait)
}

// heldHere answers, from this leader's applied state and without a log
// entry, an acquire that can only be refused: someone is parked for the lock,
// or another lease holds it and its deadline has not come on this leader's
// clock (a tick stamped now would not expire it). A refusal changes nothing,
// so like a linearizable read it needs only the caller's confirmation that
// this node still leads (VerifyLeader after the read: a quorum still taking
// this leader means no other leader can have acknowledged anything since).
// Polling clients then cost the leader a heartbeat round instead of a
// replicated, fsynced entry each.
func (n *Node) heldHere(cmd fsm.Command) (fsm.Result, bool) {
	term := n.raft.CurrentTerm()
	if n.readyTerm.Load() != term {
		return fsm.Result{}, false
	}
	holder, held := n.machine.Get(cmd.Name)
	if held && holder.LeaseID == cmd.LeaseID {
		return fsm.Result{}, false // a retry by the holder: through the log, it refreshes the lease
	}
	if n.waiters.queued(cmd.Name) {
		return fsm.Result{Status: fsm.StatusHeld, Holder: holder}, true
	}
	if !held {
		return fsm.Result{}, false
	}
	c := n.machine.Clock()
	if c.Term != term || c.Now+(n.clock.Now()-c.Stamp) >= holder.Deadline {
		return fsm.Result{}, false // due (or no stamp of ours yet): let the log decide
	}
	return fsm.Result{Status: fsm.StatusHeld, Holder: holder}, true
}

// Waiters returns how many acquires are parked on this node.
func (n *Node) Waiters() int { return n.waiters.size() }

// apply stamps cmd with this leader's clock and commits it through Raft.
func (n *Node) apply(cmd fsm.Command) (fsm.Result, error) {
	cmd.Stamp = n.clock.Now()
	f := n.raft.Apply(cmd.Encode(nil), n.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		return fsm.Result{}, raftError("apply "+cmd.Op.String(), err)
	}
	r, _ := f.Response().(fsm.Result)
	return r, nil
}

// Read returns the state machine for reading. Unless stale, it is
// linearizable: this node must lead, confirm it still does with a quorum,
// and have applied everything committed before the read began.
func (n *Node) Read(ctx context.Context, stale bool) (*fsm.Machine, error) {
	if stale {
		return n.machine, nil
	}
	if !n.IsLeader() {
		return nil, ErrNotLeader
	}
	if n.readyTerm.Load() != n.raft.CurrentTerm() {
		return nil, ErrNoLeader // a new leader before its Barrier may miss committed entries
	}
	commit := n.raft.CommitIndex()
	if err := n.raft.VerifyLeader().Error(); err != nil {
		return nil, raftError("verify leader", err)
	}
	if err := n.waitApplied(ctx, commit); err != nil {
		return nil, err
	}
	return n.machine, nil
}

func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	if n.AppliedThrough(index) {
		return nil
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for !n.AppliedThrough(index) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for index %d to apply: %w", index, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// AppliedThrough reports whether the state machine holds the effect of every
// entry up to index. Raft's AppliedIndex runs ahead of the machine (it counts
// entries handed to the FSM goroutine), so entries between what the machine
// applied and index must be ones that change nothing there (no-ops, barriers)
// or already folded into a snapshot.
func (n *Node) AppliedThrough(index uint64) bool {
	if n.raft.AppliedIndex() < index {
		return false
	}
	last := n.fsm.last.Load()
	if index <= last {
		return true
	}
	if index-last > 1024 {
		return false // a long gap is still being applied; ask again shortly
	}
	snapshot := uint64(0) // read only if needed: Stats is not cheap
	for i := last + 1; i <= index; i++ {
		var l raft.Log
		if err := n.logs.GetLog(i, &l); err != nil {
			continue // compacted: covered by the snapshot the machine restored
		}
		if l.Type != raft.LogCommand && l.Type != raft.LogConfiguration {
			continue
		}
		if snapshot == 0 {
			snapshot, _ = strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
		}
		if i > snapshot {
			return false
		}
	}
	return true
}

// NewLeaseID returns a random 128-bit lease id in URL-safe base64.
func NewLeaseID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("raftnode: no randomness for a lease id: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Shutdown stops the node gracefully: a leader first hands leadership to
// another voter so the cluster does not wait out an election timeout.
func (n *Node) Shutdown() error {
	if n.IsLeader() && n.voters() > 1 {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			n.log.Warn("leadership transfer before shutdown failed", "error", err)
		} else {
			n.log.Info("handed leadership over before shutdown")
		}
	}
	return n.Close()
}

// Close stops the node at once, as a crash would, without handing over
// leadership. The data dir stays usable for a restart.
func (n *Node) Close() error {
	var err error
	n.stopOnce.Do(func() {
		close(n.stop)
		if n.raft != nil {
			err = n.raft.Shutdown().Error()
		}
		n.wg.Wait()
		n.closeStores()
	})
	return err
}

func (n *Node) closeStores() {
	if n.transport != nil {
		n.transport.CloseStreams() // pooled connections would keep peers' handlers alive
		n.transport.Close()
	}
	if n.store != nil {
		n.store.Close()
	}
}

func (n *Node) voters() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	count := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			count++
		}
	}
	return count
}
