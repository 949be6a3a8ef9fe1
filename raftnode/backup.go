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
	if err := n.installBackup(ctx, info, snap); err != nil {
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
