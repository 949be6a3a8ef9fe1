// Package raftnode wires the lock state machine to hashicorp/raft: the log
// and stable stores (opened from raftnode/logstore: the WAL or BoltDB for
// the log, BoltDB for the vote record), file snapshots, the TCP transport,
// bootstrap and membership, the write path and the leader's clock ticks,
// parked acquires, backup restore and state checks. It knows nothing of HTTP
// handlers; the httpapi package talks to it through a small interface.
// DESIGN.md has a map of its files.
package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
	"github.com/raftlock/raftlock/raftnode/logstore"
	"go.etcd.io/bbolt"
)

// Node is one member of a raftlock cluster.
type Node struct {
	cfg       Config
	log       hclog.Logger
	clock     Clock
	machine   *fsm.Machine
	raft      *raft.Raft
	transport *watchedTransport
	boltDB    *raftboltdb.BoltStore   // raft.db: the stable store, and the log with LogStoreBoltDB
	stable    *logstore.ClosingStable // boltDB as raft's stable store, closed before boltDB
	logStore  io.Closer               // closes the log store when it is not raft.db
	logs      raft.LogStore
	ahead     *sendAhead // nil with Config.NoSendAhead; set before raft starts
	fsm       *raftFSM

	notifyCh chan bool     // leadership changes, buffered so Raft never blocks
	changed  chan struct{} // wakes the leader loop after a grant; buffered 1
	// readyTerm is the term in which this node, as leader, finished its
	// Barrier: only then do its reads see every committed entry.
	readyTerm atomic.Uint64
	// cmdFormat: the command format the leader may write (cmdversion.go);
	// formatNews wakes writes waiting for a term's first survey of it.
	cmdFormat  atomic.Pointer[cmdFormat]
	formatNews broadcast
	// configMu serializes membership changes on the leader: each one checks
	// the configuration (quorum health, promotion) and then changes it, and
	// two checks of the same configuration must not both pass. Raft's own
	// prevIndex guard cannot do it here: GetConfiguration's Index() is 0 in
	// hashicorp/raft v1.7.3.
	configMu sync.Mutex
	// reloadMu serializes changes to raft's reloadable settings (reloadRaft).
	reloadMu sync.Mutex
	// snapshotMu keeps the node's own raft snapshots (compactPastRefused)
	// out of a backup restore's install (installBackup).
	snapshotMu sync.Mutex
	// appendMu is held shared while a command is handed to Raft, and alone
	// by a backup restore, so that no command lands between the last index
	// the restore raises every lock's index to and the index Raft installs
	// the backup at (a watcher would see an index go down).
	appendMu sync.RWMutex
	// startIndex is the last log index found on disk at start; see Ready.
	startIndex uint64
	observers  []Observer
	waiters    *waitQueue
	watches    *watchHub // parked blocking reads (watch.go)
	metrics    *nodeMetrics
	pending    chan struct{} // admission slots for client writes; see applyAdmitted

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
	for id := range cfg.Peers {
		if err := nodeapi.ValidateID(id); err != nil {
			return nil, fmt.Errorf("raftnode: peer %q: %w", id, err)
		}
	}
	if err := nodeapi.ValidateID(cfg.ID); err != nil {
		return nil, fmt.Errorf("raftnode: node id %q: %w", cfg.ID, err)
	}
	if cfg.Join != "" && cfg.Announce == nil {
		return nil, errors.New("raftnode: Join needs Announce (httpapi.Joiner) to reach the cluster")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	// The data dir holds every lease id: private, even when it was made
	// beforehand with a looser mode.
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
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
		stop:      make(chan struct{}),
		pending:   make(chan struct{}, cfg.MaxPendingApplies),
	}
	n.metrics = newNodeMetrics(n)
	n.waiters = newNodeWaiters(n.apply, n.machine, cfg.MaxWaitersPerLock, cfg.MaxWaiters)
	n.watches = newWatchHub()
	if err := n.open(); err != nil {
		n.closeStores()
		return nil, err
	}
	n.wg.Add(4)
	go n.watchLeadership()
	go n.register()
	go n.watchIntegrity(cfg.StateCheckInterval)
	go n.watchLeaderCrash()
	return n, nil
}

func (n *Node) open() error {
	cfg := n.cfg
	dbPath := filepath.Join(cfg.DataDir, "raft.db")
	if err := logstore.CheckBoltFile(dbPath); err != nil {
		return err
	}
	store, err := raftboltdb.New(raftboltdb.Options{
		Path: dbPath,
		BoltOptions: &bbolt.Options{
			Timeout:        time.Second, // another process holds the data dir: fail, do not hang
			NoFreelistSync: true,        // as Consul does: less written per commit, rebuilt on open
			FreelistType:   bbolt.FreelistMapType,
		},
	})
	if err != nil {
		return fmt.Errorf("open raft store in %s: %w", cfg.DataDir, err)
	}
	n.boltDB = store
	if err := os.Chmod(dbPath, 0o600); err != nil {
		return fmt.Errorf("raft store %s: %w", dbPath, err)
	}
	logStore, closer, err := logstore.Open(cfg.DataDir, cfg.LogStore, store, n.log)
	if err != nil {
		return err
	}
	n.logStore = closer
	files, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, cfg.Logger.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("open snapshot store: %w", err)
	}
	snapDir := filepath.Join(cfg.DataDir, "snapshots")
	if err := logstore.MakePrivate(snapDir); err != nil {
		return fmt.Errorf("snapshot store %s: %w", snapDir, err)
	}
	snaps := logstore.NewPrivateSnapshots(files, snapDir, n.log)
	if err := logstore.CheckVoteRecord(store, logStore, snaps, cfg.DataDir, cfg.AllowLostVoteRecord, n.log); err != nil {
		return err
	}
	// A kill between a snapshot install (or restore) and the log reset that
	// follows it would strand the node on the WAL; finish the reset.
	scratch := func(r io.Reader) error { return fsm.New().Restore(r) }
	if err := logstore.ClearLogBelowSnapshot(logStore, snaps, scratch, n.log); err != nil {
		return err
	}
	nt, err := newTransport(cfg)
	if err != nil {
		return err
	}
	n.transport = watchTransport(nt, cfg.onAppend)

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
	// The per-peer metric names (raft_replication_*_n1) repeat the labelled
	// ones: two fewer metric updates per AppendEntries per follower.
	rc.NoLegacyTelemetry = true

	existing, err := raft.HasExistingState(logStore, store, snaps)
	if err != nil {
		return fmt.Errorf("inspect data dir: %w", err)
	}
	disk := logStore
	if cfg.wrapLogs != nil {
		disk = cfg.wrapLogs(disk)
	}
	cache, err := raft.NewLogCache(1024, disk)
	if err != nil {
		return fmt.Errorf("log cache: %w", err)
	}
	// Above the cache: it flattens the store's error into a string.
	// KeepMonotonic: the guard hides the WAL's IsMonotonic, which raft needs.
	logs := logstore.KeepMonotonic(logStore, logstore.GuardWrites(cache, n.log))
	if !cfg.NoSendAhead {
		out, err := newEarlyTransport(cfg, rc.LeaderLeaseTimeout)
		if err != nil {
			return err
		}
		header := raft.RPCHeader{ProtocolVersion: rc.ProtocolVersion, ID: []byte(rc.LocalID), Addr: nt.EncodePeer(rc.LocalID, nt.LocalAddr())}
		n.ahead = newSendAhead(logs, out, header, rc.LeaderLeaseTimeout, n.log.Named("sendahead"))
		n.transport.ahead = n.ahead
		logs = logstore.KeepMonotonic(logStore, n.ahead)
	}
	n.fsm = &raftFSM{m: n.machine, applied: n.onApplied, restored: n.watches.wakeAll}
	n.fsm.integrity.log.Store(&n.log) // before raft replays the log
	n.logs = logs
	n.stable = logstore.NewClosingStable(store)
	n.raft, err = raft.NewRaft(rc, n.fsm, logs, n.stable, snaps, n.transport)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	if n.ahead != nil {
		n.ahead.raft.Store(n.raft)
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
		n.wakeLeaderLoop()
	}
	n.metrics.applied(op, r)
	n.waiters.freed(r.Freed)
	n.waiters.freedSemaphores(r.FreedSemaphores)
	n.watches.wake(r.Changed)
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
	if n.ahead != nil {
		n.ahead.close()
	}
	if n.transport != nil {
		n.transport.CloseStreams() // pooled connections would keep peers' handlers alive
		n.transport.Close()
	}
	if n.logStore != nil {
		if err := n.logStore.Close(); err != nil {
			n.log.Error("close raft log store", "error", err)
		}
	}
	if n.stable != nil {
		n.stable.Close()
	}
	if n.boltDB != nil {
		n.boltDB.Close()
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
