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
	"github.com/raftlock/raftlock/raftnode/logstore"
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
	// Nothing may reach the log between reading its last index and the
	// install, or raft installs past the index recorded below: commands wait
	// on appendMu, membership changes (Join, Leave, promotions) on configMu.
	n.configMu.Lock()
	defer n.configMu.Unlock()
	n.appendMu.Lock()
	defer n.appendMu.Unlock()
	if err := n.raft.Barrier(n.timeoutFrom(ctx)).Error(); err != nil {
		return raftError("restore: wait for entries in flight", err)
	}
	at := max(info.Index, n.raft.LastIndex()) + 1 // where raft installs it (raft.go restoreUserSnapshot)
	snap, err := fsm.PrepareRestore(snap, at)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadBackup, err)
	}
	// From the install until the no-op after it commits, this node's state
	// is one the cluster may never commit: recorded first, durably, so that
	// no read and no restart (a kill included) takes it for the cluster's.
	// Restore's caller settles the record (settleRestore).
	if err := n.markUnconfirmed(at, n.raft.CurrentTerm(), "backup restore in progress"); err != nil {
		return err
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: info.Index, Term: info.Term, Size: int64(len(snap))}
	seededArmRestoreCrash(true) // test builds only: crash point restore-installed (seeded_on.go)
	err = n.raft.Restore(meta, bytes.NewReader(snap), n.timeoutFrom(ctx))
	seededArmRestoreCrash(false)
	if err != nil {
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
	err = n.installBackup(ctx, info, snap)
	n.settleRestore(before, err)
	if err != nil {
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

// A restore raft installs but whose commit fails (the leader lost its quorum
// before raft.Restore's no-op at R+1 committed) leaves every node that holds
// it, the leader that made it and any follower it reached as a snapshot, on
// a state the cluster may never have committed: raft's snapshot (R, T), R the
// restore's index, T the term it was made in. If the others elected a leader
// without it, that leader's entry at R is another, and hashicorp/raft v1.7.3
// gives such a node no safe way back by itself:
//
//   - restoreUserSnapshot (raft.go:1138-1194) burns R as a hole (lastLog = R
//     with no entry there) and, on a monotonic store (the WAL), deletes the
//     whole log below it;
//   - appendEntries accepts a batch whose previous entry is below R and
//     matches, and applies its entries on top of the restored state: a
//     state no replica of the cluster has;
//   - or it refuses a batch it cannot read its own entry for ("failed to get
//     log entry"), and the leader steps nextIndex back one entry per refusal
//     (replication.go:256), sending a snapshot only once its own log lacks
//     the entries (replication.go:223): with an uncompacted log, never.
//
// So a node is "unconfirmed" while its state may rest on such a restore, and
// it records (R, T) in memory and durably in the data dir (restoreRecord)
// before that state can be served:
//
//   - the leader, before raft.Restore (installBackup), and it removes the
//     record when Restore returns nil: its no-op, after R, committed in T;
//   - a follower, when an InstallSnapshot reaches past the highest commit
//     index its leader told it in that term (watchedTransport.forward,
//     gateSnapshot): no snapshot of committed state can.
//
// While unconfirmed the node says not ready and answers no read, stale ones
// too (restoreUnconfirmed), and it takes no entries from a batch that starts
// below R (gateAppend refuses it itself): so it never applies the cluster's
// entries on top of a state the cluster may not have. A leader whose log
// lacks the restore sees that refusal (watchedTransport.AppendEntries), and
// compacts its own log past it (compactPastRefused), so raft sends the node a
// snapshot. The record goes only on evidence:
//
//   - an AppendEntries whose previous entry, at or past R, matches this
//     node's own log (at R, the snapshot's term T) and whose leader commit
//     index is at least R: that leader's log holds the restore and has
//     committed it (gateAppend);
//   - a snapshot from the leader that is not past the commit it told: this
//     node's state is then the cluster's, whatever it was (gateSnapshot);
//   - as leader, raft's applied index past R: a leader applies only what it
//     committed, and its log is the one that holds the restore.
//
// Raft's applied index on a follower says nothing: it passes R+1 just as well
// when the node appended a new leader's entries after its own hole.

// unconfirmedRestoreFile, in the data dir, holds "R T" of the unconfirmed restore
// (an older version wrote "R" alone).
const unconfirmedRestoreFile = "restore-unconfirmed"

// unconfirmedPair returns the record (R, T), R = 0 for none, reading the data
// dir's record left by an earlier run on first use.
func (n *Node) unconfirmedPair() (r, t uint64) {
	g := &n.fsm.integrity
	g.unconfirmedLoad.Do(func() { n.loadUnconfirmed() })
	g.unconfirmedMu.Lock()
	defer g.unconfirmedMu.Unlock()
	return g.unconfirmedRestore.Load(), g.unconfirmedTerm.Load()
}

func (n *Node) loadUnconfirmed() {
	g := &n.fsm.integrity
	path := filepath.Join(n.cfg.DataDir, unconfirmedRestoreFile)
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			n.log.Error("cannot read the unconfirmed-restore record; serving nothing until the leader settles this node's state", "path", path, "error", err)
			n.setUnconfirmedMem(^uint64(0)>>1, 0) // refuse everything; only a leader's snapshot clears it
		}
		return
	}
	f := strings.Fields(string(b))
	var r, t uint64
	if len(f) >= 1 {
		r, err = strconv.ParseUint(f[0], 10, 64)
	}
	if err == nil && len(f) >= 2 {
		t, err = strconv.ParseUint(f[1], 10, 64)
	}
	if err != nil || len(f) == 0 || r == 0 {
		// A record we cannot read still says the state may not be the
		// cluster's: only a leader's snapshot settles it.
		n.log.Error("unreadable unconfirmed-restore record; serving nothing until the leader settles this node's state", "path", path, "content", string(b))
		r, t = ^uint64(0)>>1, 0
	}
	if t == 0 && n.raft != nil { // "R" alone: raft's snapshot at R tells its term
		stats := n.raft.Stats()
		if si, _ := strconv.ParseUint(stats["last_snapshot_index"], 10, 64); si == r {
			t, _ = strconv.ParseUint(stats["last_snapshot_term"], 10, 64)
		}
	}
	g.unconfirmedMu.Lock()
	defer g.unconfirmedMu.Unlock()
	if g.unconfirmedRestore.Load() == 0 {
		g.unconfirmedRestore.Store(r)
		g.unconfirmedTerm.Store(t)
	}
}

func (n *Node) setUnconfirmedMem(r, t uint64) {
	g := &n.fsm.integrity
	g.unconfirmedMu.Lock()
	defer g.unconfirmedMu.Unlock()
	g.unconfirmedRestore.Store(r)
	g.unconfirmedTerm.Store(t)
}

// markUnconfirmed records (r, t): at once in memory (reads and Ready refuse
// from then on), then in the data dir, written and synced with its
// directory, so that a restart (a kill included) knows of it before raft
// restores the state from its snapshot. It fails only if the record could
// not be made durable; the caller must then not let the state in.
func (n *Node) markUnconfirmed(r, t uint64, why string) error {
	if seededRestoreUnrecorded {
		return nil // test builds only: the bug before the record (seeded_on.go)
	}
	g := &n.fsm.integrity
	g.unconfirmedLoad.Do(func() { n.loadUnconfirmed() })
	g.unconfirmedMu.Lock()
	defer g.unconfirmedMu.Unlock()
	g.unconfirmedRestore.Store(r)
	g.unconfirmedTerm.Store(t)
	if err := writeSynced(n.cfg.DataDir, unconfirmedRestoreFile, fmt.Sprintf("%d %d\n", r, t)); err != nil {
		return fmt.Errorf("record an unconfirmed restore: %w", err)
	}
	n.log.Warn("this node's state may rest on a backup restore the cluster has not committed; "+
		"it serves no reads and says not ready until the leader settles it", "restore_index", r, "restore_term", t, "why", why)
	return nil
}

// clearUnconfirmed removes the record if it is still (r, t).
func (n *Node) clearUnconfirmed(r, t uint64, why string) {
	g := &n.fsm.integrity
	g.unconfirmedMu.Lock()
	defer g.unconfirmedMu.Unlock()
	if g.unconfirmedRestore.Load() != r || g.unconfirmedTerm.Load() != t || r == 0 {
		return
	}
	path := filepath.Join(n.cfg.DataDir, unconfirmedRestoreFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		// Kept on disk: a restart refuses again until the next evidence.
		n.log.Warn("cannot remove the unconfirmed-restore record", "path", path, "error", err)
	} else {
		syncDir(n.cfg.DataDir)
	}
	g.unconfirmedRestore.Store(0)
	g.unconfirmedTerm.Store(0)
	n.log.Info("this node's state is the cluster's again after an unconfirmed backup restore", "restore_index", r, "restore_term", t, "evidence", why)
}

// writeSynced replaces dir/name with data: a temporary file, synced, renamed
// over it, and the directory synced.
func writeSynced(dir, name, data string) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// settleRestore runs when Restore's install returned: nil, and the restore
// committed; else the record made before it (installBackup) is put right
// from what raft installed: a snapshot past the log's last index before the
// restore (before) is the restore's, wherever raft put it; none, and raft
// installed nothing.
func (n *Node) settleRestore(before uint64, err error) {
	r, t := n.unconfirmedPair()
	if err == nil {
		n.clearUnconfirmed(r, t, "the restore's own commit")
		return
	}
	stats := n.raft.Stats()
	si, _ := strconv.ParseUint(stats["last_snapshot_index"], 10, 64)
	st, _ := strconv.ParseUint(stats["last_snapshot_term"], 10, 64)
	if si <= before {
		if r != 0 && r > before { // the record installBackup made for nothing
			n.clearUnconfirmed(r, t, "raft installed no restore")
		}
		return
	}
	if si != r || st != t {
		if merr := n.markUnconfirmed(si, st, "restore installed, commit not seen: "+err.Error()); merr != nil {
			n.log.Error("the unconfirmed restore is recorded in memory only; a restart will not know of it", "error", merr)
		}
		return
	}
	n.log.Warn("a backup restore reached this node's state but was not confirmed committed; "+
		"this node serves no reads and says not ready until it is, or until the leader's snapshot replaces it",
		"restore_index", si, "restore_term", st, "error", err)
}

// restoreUnconfirmed reports whether this node's state may rest on a restore
// the cluster has not committed (see above). As leader, an applied index
// past R says the restore committed.
func (n *Node) restoreUnconfirmed() bool {
	r, t := n.unconfirmedPair()
	if r == 0 {
		return false
	}
	if n.IsLeader() {
		// A leader's log is the cluster's once an entry of its own term
		// commits. In the restore's own term that must be one past it (the
		// restore's no-op); a leader of a later term whose Barrier is done
		// (readyTerm) has committed everything it holds, the restore (or
		// whatever an unreadable record stood for) included.
		term := n.raft.CurrentTerm()
		// Past raft's own snapshot too, should the restore have landed past
		// the recorded index.
		if (t == term && n.raft.AppliedIndex() > max(r, n.lastSnapshotIndex())) || (t < term && n.readyTerm.Load() == term) {
			n.clearUnconfirmed(r, t, "committed in this leader's term")
			return n.fsm.integrity.unconfirmedRestore.Load() != 0
		}
	}
	return true
}

// lastSnapshot is the index and term of raft's latest snapshot on this node.
func (n *Node) lastSnapshot() (index, term uint64) {
	stats := n.raft.Stats()
	index, _ = strconv.ParseUint(stats["last_snapshot_index"], 10, 64)
	term, _ = strconv.ParseUint(stats["last_snapshot_term"], 10, 64)
	return index, term
}

// lastSnapshotIndex is the index of raft's latest snapshot on this node.
func (n *Node) lastSnapshotIndex() uint64 {
	index, _ := n.lastSnapshot()
	return index
}

// termAt is the term of this node's own entry at index, or of its snapshot
// there; ok false when it holds neither.
func (n *Node) termAt(index uint64) (uint64, bool) {
	var l raft.Log
	if err := n.logs.GetLog(index, &l); err == nil {
		return l.Term, true
	}
	stats := n.raft.Stats()
	if si, _ := strconv.ParseUint(stats["last_snapshot_index"], 10, 64); si == index {
		st, _ := strconv.ParseUint(stats["last_snapshot_term"], 10, 64)
		return st, st != 0
	}
	return 0, false
}

// gateAppend sees every AppendEntries with a commit index (not heartbeats)
// before raft does (watchedTransport.forward). On a node unconfirmed at
// (R, T) it clears the record on the leader's evidence that the restore is
// committed in its log, and it answers itself, refusing, a batch of entries
// that starts below R: raft would apply them on top of a state the leader
// may not have. The refusal says Term = the request's (or this node's own
// if higher, as raft would: then the old leader steps down), LastLog = R,
// NoRetryBackoff false: the leader steps nextIndex back (replication.go:256,
// a back-off, not a step-down) and, its first entry being at or below
// LastLog, notes the batch for compactPastRefused.
func (n *Node) gateAppend(req *raft.AppendEntriesRequest) *raft.AppendEntriesResponse {
	if n.fsm.integrity.unconfirmedRestore.Load() == 0 {
		return nil // the common case: one atomic load per batch (the record was read before setGate)
	}
	r, t := n.unconfirmedPair()
	if r == 0 {
		return nil
	}
	// Should the restore have landed past the recorded index, raft's own
	// snapshot is the state in question: evidence about an entry below it
	// says nothing of it, and batches below it must not be applied on it.
	at, term := r, t
	if si, st := n.lastSnapshot(); si > at {
		at, term = si, st
	}
	if req.PrevLogEntry >= at && req.LeaderCommitIndex >= at {
		own, ok := term, term != 0
		if req.PrevLogEntry > at {
			own, ok = n.termAt(req.PrevLogEntry)
		}
		if ok && own == req.PrevLogTerm {
			n.clearUnconfirmed(r, t, fmt.Sprintf("leader %s's log matches at %d and its commit %d covers the restore",
				req.RPCHeader.Addr, req.PrevLogEntry, req.LeaderCommitIndex))
			return nil
		}
	}
	if len(req.Entries) == 0 || req.PrevLogEntry >= at {
		return nil
	}
	return &raft.AppendEntriesResponse{Term: max(req.Term, n.raft.CurrentTerm()), LastLog: at}
}

// gateSnapshot sees every InstallSnapshot before raft does. pastCommit: the
// snapshot reaches past the highest commit index this node's leader told it
// in the request's term (or it told none yet). Such a snapshot is recorded
// unconfirmed before raft installs it; an error means the record could not
// be made durable, and the RPC must be refused. The returned func, if any,
// is called with raft's answer (installed or not).
func (n *Node) gateSnapshot(req *raft.InstallSnapshotRequest, pastCommit bool) (func(installed bool), error) {
	r, t := n.unconfirmedPair()
	idx, term := req.LastLogIndex, req.LastLogTerm
	if pastCommit {
		if r == idx && t == term {
			return nil, nil // recorded already (a retry)
		}
		if err := n.markUnconfirmed(idx, term, fmt.Sprintf("snapshot past the leader's commit (term %d)", req.Term)); err != nil {
			return nil, err
		}
		return func(installed bool) {
			if installed {
				return
			}
			// Raft refused it: the record stands for the state it had before.
			if r == 0 {
				n.clearUnconfirmed(idx, term, "raft did not install the snapshot")
			} else if cr, ct := n.unconfirmedPair(); cr == idx && ct == term {
				if err := n.markUnconfirmed(r, t, "raft did not install the snapshot"); err != nil {
					n.log.Error("cannot restore the earlier unconfirmed-restore record", "error", err)
				}
			}
		}, nil
	}
	if r == 0 {
		return nil, nil
	}
	return func(installed bool) {
		if installed {
			n.clearUnconfirmed(r, t, fmt.Sprintf("installed the leader's snapshot at %d (term %d), within its commit", idx, term))
		}
	}, nil
}

// refusedCompactEvery is the least time between two compactions
// compactPastRefused makes for one follower.
const refusedCompactEvery = time.Minute

// compactPastRefused runs on the leader (watchIntegrity): when a follower
// refused a batch of entries it claims to hold (watchedTransport noted the
// batch's last index), it takes a snapshot and compacts this log past that
// index, keeping as many trailing entries as it can, so that raft's next
// try sends the follower the snapshot instead of the same batch. A follower
// compacted for less than refusedCompactEvery ago waits; its refusal stays
// noted for a later poll, and other followers do not wait for it.
func (n *Node) compactPastRefused() {
	now := time.Now()
	noted := n.transport.takeRefused()
	if len(noted) == 0 {
		return
	}
	first, err := n.logs.FirstIndex()
	if err != nil {
		n.log.Warn("cannot read this log's first index", "error", err)
		n.transport.keepRefused(noted)
		return
	}
	index := uint64(0)
	var due []raft.ServerID
	wait := map[raft.ServerID]uint64{}
	for id, through := range noted {
		if first == 0 || first > through {
			continue // compacted past it already: raft sends the snapshot by itself
		}
		if since := now.Sub(n.transport.compactedFor[id]); since < refusedCompactEvery {
			// A follower whose disk refuses a suffix it must rewrite is noted
			// too, and a snapshot may not help it: not a snapshot a second.
			n.log.Warn("a follower still refuses entries it claims to hold; the last compaction for it was recent", "follower", id, "through", through, "ago", since)
			wait[id] = through
			continue
		}
		due = append(due, id)
		index = max(index, through)
	}
	n.transport.keepRefused(wait)
	if index == 0 {
		return
	}
	for _, id := range due {
		n.transport.compactedFor[id] = now
	}
	n.transport.compactedAt = now
	n.log.Warn("a follower refuses entries its log claims to hold (a hole in it, or a state resting on a backup restore that never committed); "+
		"compacting this log so that raft sends it a snapshot", "followers", due, "through", index, "first_index", first)
	// Everything logged before the Barrier, the refused batch too, is applied
	// when it returns: the snapshot below covers index.
	failed := func() { // not the limit's fault: try again at the next poll
		for _, id := range due {
			delete(n.transport.compactedFor, id)
		}
		n.transport.keepRefused(noted)
	}
	if err := n.raft.Barrier(n.cfg.ApplyTimeout).Error(); err != nil {
		n.log.Warn("compaction for a follower: barrier failed", "error", err)
		failed()
		return
	}
	trailing := n.cfg.TrailingLogs
	keep := uint64(0)
	if last := n.raft.LastIndex(); last > index {
		keep = min(trailing, last-index)
	}
	if err := n.reloadRaft(func(rc *raft.ReloadableConfig) { rc.TrailingLogs = keep }); err != nil {
		n.log.Warn("compaction for a follower: reload config", "error", err)
		failed()
		return
	}
	err = n.raft.Snapshot().Error()
	if rerr := n.reloadRaft(func(rc *raft.ReloadableConfig) { rc.TrailingLogs = trailing }); rerr != nil {
		n.log.Error("compaction for a follower: trailing logs not restored", "trailing_logs", trailing, "error", rerr)
	}
	if err != nil {
		n.log.Warn("compaction for a follower: snapshot failed", "error", err)
		if !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			failed()
		}
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
		if ok, err := logstore.HasWAL(dataDir); err != nil {
			return fmt.Errorf("recover: %w", err)
		} else if ok {
			logStore = LogStoreWAL
		}
	}
	dbPath := filepath.Join(dataDir, "raft.db")
	if _, err := os.Stat(dbPath); err != nil {
		return fmt.Errorf("recover: %s: %w (is %s a node's data dir?)", dbPath, err, dataDir)
	}
	if err := logstore.CheckBoltFile(dbPath); err != nil {
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
	logs, closer, err := logstore.Open(dataDir, logStore, store, log)
	if err != nil {
		return err
	}
	defer closer.Close()
	files, err := raft.NewFileSnapshotStoreWithLogger(dataDir, 2, logger.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("recover: open snapshot store: %w", err)
	}
	snapDir := filepath.Join(dataDir, "snapshots")
	snaps := logstore.NewPrivateSnapshots(files, snapDir, log)
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
	if err := logstore.MakePrivate(snapDir); err != nil {
		return fmt.Errorf("recover: snapshot store %s: %w", snapDir, err)
	}
	log.Warn("configuration rewritten", "dir", dataDir, "voters", len(servers), "last_index", machine.Clock().Index, "locks", machine.HeldCount())
	return nil
}
