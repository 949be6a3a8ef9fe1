package raftnode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/raftlock/raftlock/fsm"
	"go.etcd.io/bbolt"
)

// A backup file is
//
//	magic "RAFTLOCK-BACKUP\n" | version u32 | index u64 | term u64 | fsm length u64 |
//	fsm snapshot (fsm's "RAFTLOCK-SNAP" encoding) | SHA-256 of everything before it
//
// integers big-endian. Index and term are those of the last command the
// snapshot holds. The trailer lets a restore refuse a damaged file before
// anything reaches Raft: a user restore that the FSM then fails to read
// panics every node.
const (
	backupMagic   = "RAFTLOCK-BACKUP\n"
	backupVersion = 1
	backupHeader  = len(backupMagic) + 4 + 8 + 8 + 8
	// MaxBackupSize bounds a backup file a node will read (and the HTTP
	// body of a restore).
	MaxBackupSize = 1 << 30
)

// ErrBadBackup is returned for a file that is not a whole, intact backup.
// Its BadInput method tells the HTTP layer (which may not import raftnode)
// to answer 400.
var ErrBadBackup error = badBackupError{}

type badBackupError struct{}

func (badBackupError) Error() string  { return "not a valid raftlock backup" }
func (badBackupError) BadInput() bool { return true }

// BackupInfo describes a backup file.
type BackupInfo struct {
	Index   uint64 // Raft index of the last command in the snapshot
	Term    uint64 // its term
	Locks   int    // leases held (not counting locks in their lock-delay)
	FSMSize int64  // bytes of the fsm snapshot
	Size    int64  // bytes of the whole file
	SHA256  [sha256.Size]byte
}

// WriteBackup writes a backup file holding the fsm snapshot snap.
func WriteBackup(w io.Writer, index, term uint64, snap []byte) (int64, error) {
	buf := make([]byte, 0, backupHeader+len(snap)+sha256.Size)
	buf = append(buf, backupMagic...)
	buf = binary.BigEndian.AppendUint32(buf, backupVersion)
	buf = binary.BigEndian.AppendUint64(buf, index)
	buf = binary.BigEndian.AppendUint64(buf, term)
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(snap)))
	buf = append(buf, snap...)
	sum := sha256.Sum256(buf)
	buf = append(buf, sum[:]...)
	n, err := w.Write(buf)
	if err != nil {
		return int64(n), fmt.Errorf("write backup: %w", err)
	}
	return int64(n), nil
}

// ReadBackup reads and checks a whole backup file (at most MaxBackupSize
// bytes): header, checksum, and that the fsm snapshot decodes. It returns the
// fsm snapshot's bytes.
func ReadBackup(r io.Reader) (BackupInfo, []byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBackupSize+1))
	if err != nil {
		return BackupInfo{}, nil, fmt.Errorf("read backup: %w", err)
	}
	if len(data) > MaxBackupSize {
		return BackupInfo{}, nil, fmt.Errorf("%w: over %d bytes", ErrBadBackup, MaxBackupSize)
	}
	return ParseBackup(data)
}

// ParseBackup checks a backup file held in memory; see ReadBackup.
func ParseBackup(data []byte) (BackupInfo, []byte, error) {
	bad := func(format string, args ...any) (BackupInfo, []byte, error) {
		return BackupInfo{}, nil, fmt.Errorf("%w: "+format, append([]any{ErrBadBackup}, args...)...)
	}
	if len(data) < len(backupMagic) || string(data[:len(backupMagic)]) != backupMagic {
		return bad("wrong magic (not a file written by raftlock snapshot save)")
	}
	if len(data) < backupHeader+sha256.Size {
		return bad("truncated: %d bytes", len(data))
	}
	be := binary.BigEndian
	h := data[len(backupMagic):]
	if v := be.Uint32(h); v != backupVersion {
		return bad("format version %d, this raftlock reads %d", v, backupVersion)
	}
	info := BackupInfo{Index: be.Uint64(h[4:]), Term: be.Uint64(h[12:]), Size: int64(len(data))}
	fsmLen := be.Uint64(h[20:])
	if fsmLen != uint64(len(data)-backupHeader-sha256.Size) {
		return bad("truncated or padded: header says %d snapshot bytes, file has %d", fsmLen, len(data)-backupHeader-sha256.Size)
	}
	body := data[:len(data)-sha256.Size]
	info.SHA256 = sha256.Sum256(body)
	if !bytes.Equal(info.SHA256[:], data[len(body):]) {
		return bad("checksum mismatch: the file is damaged")
	}
	snap := body[backupHeader:]
	m := fsm.New()
	if err := m.Restore(bytes.NewReader(snap)); err != nil {
		return bad("%v", err)
	}
	if c := m.Clock(); c.Index != info.Index {
		return bad("header index %d but the snapshot holds index %d", info.Index, c.Index)
	}
	info.FSMSize = int64(len(snap))
	info.Locks = m.HeldCount()
	return info, snap, nil
}

// Backup writes a consistent backup of the cluster's state to w. Only the
// leader can: its Barrier makes the machine hold every committed entry, and
// the machine's snapshot is taken under its lock at one applied index.
func (n *Node) Backup(ctx context.Context, w io.Writer) (BackupInfo, error) {
	if !n.IsLeader() {
		return BackupInfo{}, ErrNotLeader
	}
	if err := n.raft.Barrier(n.timeoutFrom(ctx)).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return BackupInfo{}, ErrNotLeader
		}
		return BackupInfo{}, fmt.Errorf("backup: barrier: %w", err)
	}
	var snap bytes.Buffer
	if _, err := n.machine.Snapshot().WriteTo(&snap); err != nil {
		return BackupInfo{}, fmt.Errorf("backup: %w", err)
	}
	// Read back: gives the index the snapshot holds, and proves the bytes
	// restore before anyone relies on them.
	m := fsm.New()
	if err := m.Restore(bytes.NewReader(snap.Bytes())); err != nil {
		return BackupInfo{}, fmt.Errorf("backup: own snapshot does not read back: %w", err)
	}
	c := m.Clock()
	var file bytes.Buffer
	if _, err := WriteBackup(&file, c.Index, c.Term, snap.Bytes()); err != nil {
		return BackupInfo{}, err
	}
	info, _, err := ParseBackup(file.Bytes())
	if err != nil {
		return BackupInfo{}, fmt.Errorf("backup: %w", err)
	}
	if _, err := w.Write(file.Bytes()); err != nil {
		return BackupInfo{}, fmt.Errorf("backup: write: %w", err)
	}
	n.log.Info("backup taken", "index", info.Index, "term", info.Term, "locks", info.Locks, "bytes", info.Size)
	return info, nil
}

// installBackup hands the backup to Raft's user restore with every lock's
// index raised to the index Raft installs it at, so none goes down for a
// watcher. Raft installs it just past its last index, so no command may
// land between reading that index and the install: appendMu holds new
// ones off, and a Barrier first puts those already handed over in the log.
func (n *Node) installBackup(ctx context.Context, info BackupInfo, snap []byte) error {
	if seededRestoreLowersIndex {
		return n.seededInstallBackup(ctx, info, snap) // test builds only (seeded_on.go)
	}
	n.appendMu.Lock()
	defer n.appendMu.Unlock()
	if err := n.raft.Barrier(n.timeoutFrom(ctx)).Error(); err != nil {
		return raftError("restore: wait for entries in flight", err)
	}
	snap, err := fsm.PrepareRestore(snap, max(info.Index, n.raft.LastIndex())+1)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadBackup, err)
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: info.Index, Term: info.Term, Size: int64(len(snap))}
	if err := n.raft.Restore(meta, bytes.NewReader(snap), n.timeoutFrom(ctx)); err != nil {
		return raftError("restore snapshot", err)
	}
	return nil
}

// Restore replaces the whole cluster's state with a backup, through Raft's
// user restore: the leader installs it at an index past its last one, so
// every token granted afterwards is larger than any granted before, and
// followers receive it as a snapshot. A file that fails ReadBackup's checks
// is refused (ErrBadBackup) and changes nothing.
func (n *Node) Restore(ctx context.Context, r io.Reader) (BackupInfo, error) {
	info, snap, err := ReadBackup(r)
	if err != nil {
		return BackupInfo{}, err
	}
	if !n.IsLeader() {
		return BackupInfo{}, ErrNotLeader
	}
	before := n.raft.LastIndex()
	if err := n.installBackup(ctx, info, snap); err != nil {
		n.noteUnconfirmedRestore(before, err)
		return BackupInfo{}, err
	}
	// The machine's last command index is the backup's, far below Raft's
	// applied index after the hole Restore leaves: a command entry now
	// brings every replica's machine past it (see AppliedThrough), before
	// Restore returns. (The woken leader loop below would tick too, since
	// the restored clock's term is none; this does not rely on it.)
	if _, err := n.apply(fsm.Command{Op: fsm.OpTick}); err != nil {
		n.log.Warn("tick after restore failed", "error", err)
	}
	// Acquires parked here wait for a release that may never come: the
	// restore freed their locks and permits without one. A lock still held
	// (a semaphore still full) keeps them.
	n.waiters.freed(n.waiters.parkedNames())
	if sems := n.waiters.sems; sems != nil {
		sems.freed(sems.parkedNames())
	}
	// The leader loop may sleep an hour when no lease existed before:
	// the restored leases need its ticks to expire on time.
	select {
	case n.changed <- struct{}{}:
	default:
	}
	n.log.Warn("cluster state restored from a backup", "backup_index", info.Index, "backup_term", info.Term, "locks", info.Locks)
	return info, nil
}

// A restore raft installs here but whose commit fails (the leader lost its
// quorum before a follower had the snapshot: raft.Restore's no-op is then
// "outcome unknown") leaves this node's machine on a state the cluster may
// never have committed, recorded by raft as a snapshot at an index R past
// its log. If the others elected a leader without it, that leader's entry at
// R is another, and hashicorp/raft v1.7.3 gives this node no way back:
//
//   - restoreUserSnapshot (raft.go:1138-1194) burns R as a hole (lastLog = R
//     with no entry there) and, on a monotonic store (the WAL), deletes the
//     whole log below it;
//   - appendEntries (raft.go:1509-1521) reads its own entry for every
//     incoming index up to its last one, and refuses the batch when that read
//     fails ("failed to get log entry"), without clearing anything;
//   - the leader then steps nextIndex back one entry per refusal
//     (replication.go:256) and sends a snapshot only when its own log lacks
//     the entries (replication.go:223, setupAppendEntries): with an
//     uncompacted log, never.
//
// Two things put it right. The node says it is not ready and answers no read
// from that state until raft's applied index shows the restore confirmed or
// replaced (restoreUnconfirmed). And the leader notices a follower refusing
// entries it claims to hold (watchedTransport.AppendEntries) and compacts its
// own log past them (compactPastRefused), so raft sends that follower its
// snapshot, which takes the uncommitted state out.

// noteUnconfirmedRestore records a restore that failed after raft installed
// it on this node: a snapshot past the log's last index before the restore
// (before) is the restore's.
func (n *Node) noteUnconfirmedRestore(before uint64, err error) {
	snapIndex, _ := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
	if snapIndex <= before {
		return // refused before raft installed anything
	}
	n.fsm.integrity.unconfirmedRestore.Store(snapIndex)
	// Kept across a restart too: raft restores the same state from the
	// same snapshot then.
	path := filepath.Join(n.cfg.DataDir, unconfirmedRestoreFile)
	if werr := os.WriteFile(path, []byte(strconv.FormatUint(snapIndex, 10)+"\n"), 0o600); werr != nil {
		n.log.Error("cannot record the unconfirmed restore in the data dir; a restart will not know of it", "path", path, "error", werr)
	}
	n.log.Warn("a backup restore reached this node's state but was not confirmed committed; "+
		"this node serves no reads and says not ready until it is, or until the leader's snapshot replaces it",
		"restore_index", snapIndex, "error", err)
}

// unconfirmedRestoreFile, in the data dir, holds the index of a restore
// noteUnconfirmedRestore recorded, until restoreUnconfirmed sees it settled.
const unconfirmedRestoreFile = "restore-unconfirmed"

// restoreUnconfirmed reports whether this node's state is a restore it
// installed whose commit it has not seen (noteUnconfirmedRestore). Raft's
// applied index past R+1 (R+1 is raft.Restore's own no-op, R the restore's
// index) says the cluster took the restore, or that a snapshot from the
// leader replaced it: this node's log cannot pass R+1 otherwise (raft
// v1.7.3 may apply its own entry at R+1 on a batch it accepts below R, so
// R+1 alone does not tell). As leader, a commit past R says it.
func (n *Node) restoreUnconfirmed() bool {
	g := &n.fsm.integrity
	path := filepath.Join(n.cfg.DataDir, unconfirmedRestoreFile)
	g.unconfirmedLoad.Do(func() { // once a process: the file a run before this one left
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		if r, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			g.unconfirmedRestore.CompareAndSwap(0, r)
		} else {
			n.log.Warn("unreadable unconfirmed-restore record; ignored", "path", path, "error", err)
		}
	})
	r := g.unconfirmedRestore.Load()
	if r == 0 {
		return false
	}
	applied := n.raft.AppliedIndex()
	if applied > r+1 || (applied > r && n.IsLeader()) {
		if g.unconfirmedRestore.CompareAndSwap(r, 0) {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				n.log.Warn("cannot remove the unconfirmed-restore record", "path", path, "error", err)
			}
			n.log.Info("this node's state is the cluster's again after an unconfirmed backup restore", "restore_index", r, "applied", applied)
		}
		return false
	}
	return true
}

// refusedCompactEvery is the least time between two compactions
// compactPastRefused makes.
const refusedCompactEvery = time.Minute

// compactPastRefused runs on the leader (watchIntegrity): when a follower
// refused a batch of entries it claims to hold (watchedTransport noted the
// batch's last index), it takes a snapshot and compacts this log past that
// index, keeping as many trailing entries as it can, so that raft's next
// try sends the follower the snapshot instead of the same batch.
func (n *Node) compactPastRefused() {
	index := n.transport.unreadable.Swap(0)
	if index == 0 {
		return
	}
	first, err := n.logs.FirstIndex()
	if err != nil {
		n.log.Warn("cannot read this log's first index", "error", err)
		return
	}
	if first == 0 || first > index {
		return // compacted past it already: raft sends the snapshot by itself
	}
	if since := time.Since(n.transport.compactedAt); since < refusedCompactEvery {
		// A follower whose disk refuses a suffix it must rewrite is noted
		// too, and a snapshot may not help it: not a snapshot a second.
		n.log.Warn("a follower still refuses entries it claims to hold; the last compaction for it was recent", "through", index, "ago", since)
		return
	}
	n.transport.compactedAt = time.Now()
	n.log.Warn("a follower refuses entries its log claims to hold (a hole in it, as after a backup restore that never committed); "+
		"compacting this log so that raft sends it a snapshot", "through", index, "first_index", first)
	// Everything logged before the Barrier, the refused batch too, is applied
	// when it returns: the snapshot below covers index.
	if err := n.raft.Barrier(n.cfg.ApplyTimeout).Error(); err != nil {
		n.log.Warn("compaction for a follower: barrier failed", "error", err)
		return
	}
	rc := n.raft.ReloadableConfig()
	keep := uint64(0)
	if last := n.raft.LastIndex(); last > index {
		keep = min(rc.TrailingLogs, last-index)
	}
	short := rc
	short.TrailingLogs = keep
	if err := n.raft.ReloadConfig(short); err != nil {
		n.log.Warn("compaction for a follower: reload config", "error", err)
		return
	}
	err = n.raft.Snapshot().Error()
	if rerr := n.raft.ReloadConfig(rc); rerr != nil {
		n.log.Error("compaction for a follower: trailing logs not restored", "trailing_logs", rc.TrailingLogs, "error", rerr)
	}
	if err != nil {
		n.log.Warn("compaction for a follower: snapshot failed", "error", err)
		return
	}
	first, _ = n.logs.FirstIndex()
	n.log.Info("log compacted for a follower that needs a snapshot", "first_index", first)
}

// SaveSnapshot writes a backup file to w (httpapi.Snapshotter).
func (n *Node) SaveSnapshot(ctx context.Context, w io.Writer) error {
	_, err := n.Backup(ctx, w)
	return err
}

// RestoreSnapshot restores a backup file read from r (httpapi.Snapshotter).
func (n *Node) RestoreSnapshot(ctx context.Context, r io.Reader) error {
	_, err := n.Restore(ctx, r)
	return err
}

// parkedNames returns the locks (in a semaphore queue: the semaphores)
// someone waits for.
func (q *waitQueue) parkedNames() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	names := make([]string, 0, len(q.locks))
	for name := range q.locks {
		names = append(names, name)
	}
	return names
}

// timeoutFrom is how long a Raft call may wait: ctx's deadline, else ApplyTimeout.
func (n *Node) timeoutFrom(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if left := time.Until(d); left > 0 {
			return left
		}
		return time.Millisecond
	}
	return n.cfg.ApplyTimeout
}

// Recover rewrites the Raft configuration of a stopped node's data dir to
// peers (id -> Raft address), with hashicorp/raft's RecoverCluster: after
// losing a quorum for good, the survivors start as a smaller cluster. Every
// survivor must get the same peers. Writes acknowledged only by lost nodes
// are lost; a lost node that comes back afterwards could form a second
// cluster. logStore is the serve flag of the same name; "" finds the log
// where it is.
func Recover(dataDir, logStore string, peers map[string]string, logger hclog.Logger) error {
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Name: "raftlock"})
	}
	log := logger.Named("recover")
	if len(peers) == 0 {
		return errors.New("recover: at least one peer is required")
	}
	if logStore == "" {
		// Wherever the log is now: recovering must not move it between
		// stores (the next start with the node's own flag would move it back).
		logStore = LogStoreBoltDB
		if ok, err := walExists(dataDir); err != nil {
			return fmt.Errorf("recover: %w", err)
		} else if ok {
			logStore = LogStoreWAL
		}
	}
	dbPath := filepath.Join(dataDir, "raft.db")
	if _, err := os.Stat(dbPath); err != nil {
		return fmt.Errorf("recover: %s: %w (is %s a node's data dir?)", dbPath, err, dataDir)
	}
	if err := checkBoltFile(dbPath); err != nil {
		return err
	}
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        dbPath,
		BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		return fmt.Errorf("recover: open raft store in %s (is the node still running?): %w", dataDir, err)
	}
	defer store.Close()
	logs, closer, err := openLogStore(dataDir, logStore, store, log)
	if err != nil {
		return err
	}
	defer closer.Close()
	files, err := raft.NewFileSnapshotStoreWithLogger(dataDir, 2, logger.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("recover: open snapshot store: %w", err)
	}
	snapDir := filepath.Join(dataDir, "snapshots")
	snaps := privateSnapshots{SnapshotStore: files, dir: snapDir, log: log}
	var servers []raft.Server
	for id, addr := range peers {
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: raft.Voter})
	}
	machine := fsm.New()
	f := &raftFSM{m: machine}
	f.integrity.log.Store(&log)
	rc := raft.DefaultConfig()
	rc.Logger = logger.Named("raft")
	rc.LocalID = servers[0].ID // RecoverCluster checks the config only; no node runs
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	if err := raft.RecoverCluster(rc, f, logs, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
		return fmt.Errorf("recover cluster in %s: %w", dataDir, err)
	}
	if err := makePrivate(snapDir); err != nil {
		return fmt.Errorf("recover: snapshot store %s: %w", snapDir, err)
	}
	log.Warn("configuration rewritten", "dir", dataDir, "voters", len(servers), "last_index", machine.Clock().Index, "locks", machine.HeldCount())
	return nil
}
