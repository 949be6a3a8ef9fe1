package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/raftnode/logstore"
)

// killAtLogClear is a log store that, at its first DeleteRange, records the
// data dir as a kill -9 at that instant would leave it, then goes on.
type killAtLogClear struct {
	raft.LogStore
	once    *sync.Once
	snap    func()
	crashed chan struct{}
}

func (c killAtLogClear) DeleteRange(min, max uint64) error {
	c.once.Do(func() {
		c.snap()
		close(c.crashed)
	})
	return c.LogStore.DeleteRange(min, max)
}

// restartAt brings node id back on its address with cfg.
func (tr *trio) restartAt(id string, cfg Config) {
	tr.t.Helper()
	var ln net.Listener
	waitUntil(tr.t, id+"'s raft port", func() bool {
		var err error
		ln, err = net.Listen("tcp", cfg.RaftAddr)
		return err == nil
	})
	cfg.RaftListener = ln
	tr.start(id, cfg)
}

func acquireOrFail(t *testing.T, n *Node, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := fsm.Command{Op: fsm.OpAcquire, Name: name, LeaseID: "lease-0123456789abcdef", TTL: 600_000}
	if r, err := n.Apply(ctx, cmd); err != nil || r.Status != fsm.StatusOK {
		t.Fatalf("acquire %s: %+v %v", name, r, err)
	}
}

// A follower on the WAL (the default) that is far behind gets the leader's
// snapshot. hashicorp/raft persists the snapshot, restores the FSM from it,
// and only then clears the old log (removeOldLogs: DeleteRange over the whole
// log, because the WAL is a MonotonicLogStore). A kill -9 in between leaves
// a snapshot at S beside a WAL whose last entry L is below S. On restart
// raft restores the snapshot and then asks the WAL to append S+1 after L:
// raft-wal refuses ("non-monotonic log entries"), on every try, for good.
// The follower never catches up again (with boltdb, which takes the gap, it
// does), and the cluster runs one failure from losing its quorum.
//
// Expected: the restarted follower applies the leader's later entries at
// once: its start clears the log the snapshot covers (logstore.ClearLogBelowSnapshot),
// so the WAL refuses no append.
// Before that fix it got there the slow way: the first append after the
// restart was refused, the follower then reported the entry before it
// missing, the leader stepped back one entry a round (no backoff on a
// missing entry) until it was below its own first index, and sent its
// snapshot again, whose install cleared the WAL. Cost: about TrailingLogs
// round trips (10,240 by default) of up to 256 entries each before the
// follower moved; with TrailingLogs 8 here only the refusal in the log
// shows it.
func TestWALFollowerKilledBetweenSnapshotInstallAndLogClearRecovers(t *testing.T) {
	tr := startTrio(t, Config{SnapshotThreshold: 1_000_000, SnapshotInterval: time.Hour, TrailingLogs: 8, StateCheckInterval: -1})
	leader := tr.leader()
	for i := range 10 {
		acquireOrFail(t, leader, fmt.Sprintf("before/%d", i))
	}
	var fid string
	for id, n := range tr.nodes {
		if n != leader {
			fid = id
			break
		}
	}
	f := tr.nodes[fid]
	waitUntil(t, "the follower to apply the first writes", func() bool {
		return f.raft.AppliedIndex() >= leader.raft.LastIndex()
	})
	f.Close()
	delete(tr.nodes, fid)
	walLast, err := stoppedWALLast(t, tr.cfgs[fid].DataDir)
	if err != nil || walLast == 0 {
		t.Fatalf("follower's wal: last %d, %v", walLast, err)
	}

	// While it is down the leader moves on and compacts its log past it.
	for i := range 100 {
		acquireOrFail(t, leader, fmt.Sprintf("while-down/%d", i))
	}
	if err := leader.raft.Snapshot().Error(); err != nil {
		t.Fatalf("leader snapshot: %v", err)
	}

	// The follower comes back, installs the snapshot, and is "killed" at
	// the log reset that follows the install.
	crashDir := filepath.Join(t.TempDir(), "crash")
	cfg := tr.cfgs[fid]
	crashed := make(chan struct{})
	cfg.wrapLogs = func(s raft.LogStore) raft.LogStore {
		return killAtLogClear{LogStore: s, once: &sync.Once{}, crashed: crashed,
			snap: func() { copyCrashImage(t, cfg.DataDir, crashDir) }}
	}
	tr.restartAt(fid, cfg)
	select {
	case <-crashed:
	case <-time.After(20 * time.Second):
		t.Fatal("the follower never cleared its log after a snapshot install")
	}
	if snaps, _ := filepath.Glob(filepath.Join(crashDir, "snapshots", "*", "meta.json")); len(snaps) == 0 {
		t.Fatal("no installed snapshot in the data dir at the instant of the kill")
	}
	tr.nodes[fid].Close()
	delete(tr.nodes, fid)
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(crashDir, cfg.DataDir); err != nil {
		t.Fatal(err)
	}

	// Restart on what the kill left.
	var logs syncBuffer
	cfg = tr.cfgs[fid]
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	tr.restartAt(fid, cfg)
	f = tr.nodes[fid]
	for i := range 10 {
		acquireOrFail(t, leader, fmt.Sprintf("after/%d", i))
	}
	want := leader.raft.LastIndex()
	deadline := time.Now().Add(15 * time.Second)
	// The state machine's own applied index: raft's AppliedIndex moves when
	// raft hands entries to the FSM goroutine, before they are applied.
	for f.fsm.last.Load() < want {
		if time.Now().After(deadline) {
			msg := logs.String()
			if i := strings.Index(msg, "non-monotonic"); i >= 0 {
				msg = msg[max(0, i-300):min(len(msg), i+200)]
			} else if len(msg) > 2000 {
				msg = msg[len(msg)-2000:]
			}
			t.Fatalf("the restarted follower is stuck at applied index %d (snapshot %s), leader at %d; WAL held up to %d before the install. Its log:\n%s",
				f.fsm.last.Load(), f.raft.Stats()["last_snapshot_index"], want, walLast, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := f.Machine().HeldCount(); got != 120 {
		t.Fatalf("follower holds %d locks, want 120", got)
	}
	if msg := logs.String(); strings.Contains(msg, "non-monotonic") {
		i := strings.Index(msg, "non-monotonic")
		t.Fatalf("the restarted follower caught up only after its WAL refused an append (the leader walked back to its snapshot):\n%s",
			msg[max(0, i-300):min(len(msg), i+200)])
	}
}

// stoppedWALLast is the last index in a stopped node's WAL, opened as a
// node opens it (raft.db holds no log beside a WAL, so nothing moves).
func stoppedWALLast(t *testing.T, dataDir string) (uint64, error) {
	t.Helper()
	bolt, err := raftboltdb.NewBoltStore(filepath.Join(dataDir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	w, closer, err := logstore.Open(dataDir, LogStoreWAL, bolt, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return w.LastIndex()
}

// A backup restore on a single node (raftlock snapshot restore): raft
// writes the backup as a local snapshot at an index B just past its last
// one, restores the machine from it, and then clears the whole log
// (removeOldLogs, because the WAL is a MonotonicLogStore). A kill -9 in
// between (the window includes restoring the machine) leaves a snapshot at
// B beside a WAL that ends at B-1. Every start then leads with last index
// B and appends at B+1; raft-wal refuses ("non-monotonic log entries:
// tried to append index B+1 after B-1"), the leader steps down, is elected
// again, and fails the same way, for good. On boltdb, which takes the gap,
// the node writes on.
//
// Expected: restarted, the node takes writes (its start clears the log the
// snapshot covers: logstore.ClearLogBelowSnapshot). Before that fix every write
// failed and the log said non-monotonic.
func TestWALRestoreKilledBetweenSnapshotAndLogClearStillTakesWrites(t *testing.T) {
	for _, kind := range []string{LogStoreWAL, LogStoreBoltDB} {
		t.Run(kind, func(t *testing.T) { restoreKilledBeforeLogReset(t, kind) })
	}
}

func restoreKilledBeforeLogReset(t *testing.T, kind string) {
	crashDir := filepath.Join(t.TempDir(), "crash")
	crashed := make(chan struct{})
	var dataDir string
	n := startSingle(t, Config{LogStore: kind, StateCheckInterval: -1, wrapLogs: func(s raft.LogStore) raft.LogStore {
		return killAtLogClear{LogStore: s, once: &sync.Once{}, crashed: crashed, snap: func() { copyCrashImage(t, dataDir, crashDir) }}
	}})
	dataDir = n.cfg.DataDir
	for i := range 5 {
		acquireOrFail(t, n, fmt.Sprintf("before/%d", i))
	}
	var backup bytes.Buffer
	if _, err := n.Backup(context.Background(), &backup); err != nil {
		t.Fatal(err)
	}
	acquireOrFail(t, n, "after-backup")
	if _, err := n.RestoreBackupWith(context.Background(), bytes.NewReader(backup.Bytes()), RestoreOptions{}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	select {
	case <-crashed:
	default:
		if kind == LogStoreWAL {
			t.Fatal("the restore cleared no log")
		}
		// boltdb: raft clears nothing after a restore; the kill is "now".
		copyCrashImage(t, dataDir, crashDir)
	}
	cfg := n.cfg
	n.Close()
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(crashDir, cfg.DataDir); err != nil {
		t.Fatal(err)
	}

	var logs syncBuffer
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	cfg.wrapLogs = nil
	var ln net.Listener
	waitUntil(t, "the raft port", func() bool {
		var err error
		ln, err = net.Listen("tcp", cfg.RaftAddr)
		return err == nil
	})
	cfg.RaftListener = ln
	n2, err := New(cfg)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer n2.Close()
	deadline := time.Now().Add(10 * time.Second)
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := n2.Apply(ctx, fsm.Command{Op: fsm.OpAcquire, Name: "after-restart", LeaseID: "lease-0123456789abcdef", TTL: 600_000})
		cancel()
		if err == nil && r.Status == fsm.StatusOK {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			msg := logs.String()
			if i := strings.Index(msg, "non-monotonic"); i >= 0 {
				msg = msg[max(0, i-200):min(len(msg), i+200)]
			} else if len(msg) > 1500 {
				msg = msg[len(msg)-1500:]
			}
			t.Fatalf("10 s after restarting on what a kill during the restore left, no write goes through (last: %v; state %s, last index %d, snapshot %s). Log:\n%s",
				lastErr, n2.raft.State(), n2.raft.LastIndex(), n2.raft.Stats()["last_snapshot_index"], msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
