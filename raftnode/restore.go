package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

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

// installBackup hands the backup state m to Raft's user restore with every
// lock's index raised to the index Raft installs it at, so none goes down
// for a watcher, and the running cluster's node table (fsm.PrepareRestore).
// Raft installs it just past its last index, so no command may land between
// reading that index and the install: appendMu holds new ones off, and a
// Barrier first puts those already handed over in the log. It reports
// whether raft.Restore was called.
func (n *Node) installBackup(ctx context.Context, info BackupInfo, m *fsm.Machine) (bool, error) {
	if seededRestoreLowersIndex {
		return true, n.seededInstallBackup(ctx, info, m) // test builds only (seeded_on.go)
	}
	// Nothing may reach the log between reading its last index and the
	// install, or raft installs past the index recorded below: commands wait
	// on appendMu, membership changes (Join, Leave, promotions) on configMu.
	n.configMu.Lock()
	defer n.configMu.Unlock()
	n.appendMu.Lock()
	defer n.appendMu.Unlock()
	// No raft snapshot may be in flight across the install. hashicorp/raft
	// v1.7.3 takes the FSM's state for a snapshot, then persists it and
	// sets its last snapshot to that index, with nothing ordering that
	// against a user restore: a periodic snapshot begun at R-1 and
	// finished after the restore set the last snapshot back below R, the
	// leader then found neither the entry at R (the restore's hole) nor a
	// snapshot at R to replicate from, and sent its snapshot to every
	// follower in a loop, never committing again. So periodic snapshots are
	// held off (a threshold out of reach) and one user snapshot
	// waits out any in flight before the install; compactPastRefused's
	// snapshots take snapshotMu.
	n.snapshotMu.Lock()
	defer n.snapshotMu.Unlock()
	// Only the threshold: raft reads it each time its snapshot timer fires,
	// while a changed interval would take effect only after the timer armed
	// meanwhile had run out (a day, had it been raised too).
	if err := n.reloadRaft(func(rc *raft.ReloadableConfig) { rc.SnapshotThreshold = math.MaxUint64 }); err != nil {
		return false, fmt.Errorf("restore: hold snapshots off: %w", err)
	}
	defer func() {
		if err := n.reloadRaft(func(rc *raft.ReloadableConfig) { rc.SnapshotThreshold = n.cfg.SnapshotThreshold }); err != nil {
			n.log.Error("snapshot settings not restored after a restore", "error", err)
		}
	}()
	// Any answer but a shutdown says raft's snapshot goroutine, which
	// takes snapshots one at a time, has finished whatever was in flight.
	if err := n.raft.Snapshot().Error(); errors.Is(err, raft.ErrRaftShutdown) {
		return false, raftError("restore: wait for a snapshot in flight", err)
	}
	if err := n.raft.Barrier(n.timeoutFrom(ctx)).Error(); err != nil {
		return false, raftError("restore: wait for entries in flight", err)
	}
	at := max(info.Index, n.raft.LastIndex()) + 1 // where raft installs it (raft.go restoreUserSnapshot)
	m.PrepareRestore(at, n.machine)
	// From the install until the no-op after it commits, this node's state
	// is one the cluster may never commit: recorded first, durably, so that
	// no read and no restart (a kill included) takes it for the cluster's.
	// RestoreBackupWith settles the record (settleRestore).
	if err := n.markUnconfirmed(at, n.raft.CurrentTerm(), "backup restore in progress"); err != nil {
		return false, err
	}
	seededArmRestoreCrash(true) // test builds only: crash point restore-installed (seeded_on.go)
	err := n.restoreState(ctx, info, m)
	seededArmRestoreCrash(false)
	if err != nil {
		return true, raftError("restore snapshot", err)
	}
	return true, nil
}

// restoreState streams m's snapshot into raft.Restore, which needs its size
// first: the snapshot is written twice, once to count, so it is never held
// in memory as bytes beside the state.
func (n *Node) restoreState(ctx context.Context, info BackupInfo, m *fsm.Machine) error {
	snap := m.Snapshot()
	size, err := snap.WriteTo(io.Discard)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := snap.WriteTo(pw)
		pw.CloseWithError(err)
	}()
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: info.Index, Term: info.Term, Size: size}
	err = n.raft.Restore(meta, pr, n.timeoutFrom(ctx))
	pr.CloseWithError(errors.New("restore returned")) // a writer raft stopped reading ends here
	return err
}

// RestoreOptions changes what a restore accepts.
type RestoreOptions struct {
	// AllowOtherCluster restores a backup whose cluster id is not this
	// cluster's, or that has none (taken before clusters had ids): a
	// cluster rebuilt from another's backup.
	AllowOtherCluster bool
}

// ErrOtherCluster is a backup refused for its cluster id (an ErrBadBackup).
var ErrOtherCluster = fmt.Errorf("%w: another cluster's backup", ErrBadBackup)

// checkCluster refuses a backup of another cluster unless opts allow it.
func (n *Node) checkCluster(info BackupInfo, opts RestoreOptions) error {
	live := n.machine.ClusterID()
	switch {
	case info.ClusterID != "" && info.ClusterID == live:
		return nil
	case opts.AllowOtherCluster:
		n.log.Warn("restoring another cluster's backup, as asked", "backup_cluster_id", info.ClusterID, "cluster_id", live)
		return nil
	case info.ClusterID == "":
		return fmt.Errorf("%w: the backup carries no cluster id (taken by a build before cluster ids); "+
			"if it is this cluster's, restore it with allow_other_cluster", ErrOtherCluster)
	case live == "":
		return fmt.Errorf("%w: this cluster has no id yet (its leader writes one once it leads); "+
			"retry, or restore with allow_other_cluster", ErrOtherCluster)
	}
	return fmt.Errorf("%w: the backup is of cluster %s, this is cluster %s; to rebuild this cluster from it, "+
		"restore with allow_other_cluster", ErrOtherCluster, info.ClusterID, live)
}

// RestoreBackupWith replaces the whole cluster's state with a backup, through
// Raft's user restore: the leader installs it at an index past its last
// one, so every token granted afterwards is larger than any granted before
// (the backup's own are at most its index), and followers receive it as a
// snapshot. A file that fails DecodeBackup's checks, or another cluster's
// backup unless opts allow it, is refused (ErrBadBackup) and changes
// nothing. A leader whose install failed steps down (stepDownAfterRestore).
func (n *Node) RestoreBackupWith(ctx context.Context, r io.Reader, opts RestoreOptions) (BackupInfo, error) {
	if !n.IsLeader() {
		return BackupInfo{}, ErrNotLeader
	}
	info, m, err := DecodeBackup(r)
	if err != nil {
		return BackupInfo{}, err
	}
	if err := n.checkCluster(info, opts); err != nil {
		return BackupInfo{}, err
	}
	// A state that needs command format 5 (sessions, semaphores, shared
	// locks, or a log that held format 5) installs as a snapshot only a
	// build reading format 5 can load: restored into a cluster with an older
	// member, it would strand that member and mark the state as proof that
	// every member reads format 5. The format rule decides, as for a write.
	if need := m.ProvenCommandVersion(); need > 1 {
		if v := n.awaitFormat(ctx, fsm.Command{Op: fsm.OpSessionCreate}); v < need {
			return BackupInfo{}, fmt.Errorf("%w: the backup holds state that needs command format %d on every member; this leader may write format %d (a member runs an older build, or did not answer)", ErrNotSupportedYet, need, v)
		}
	}
	if !n.IsLeader() {
		return BackupInfo{}, ErrNotLeader
	}
	before := n.raft.LastIndex()
	called, err := n.installBackup(ctx, info, m)
	installed := n.settleRestore(before, err)
	if err != nil {
		if called {
			n.stepDownAfterRestore(err)
		}
		if installed {
			// raft.Restore can fail after it installed the backup (its
			// no-op missed the timer, leadership moved): the followers may
			// still get it and commit it. Whatever raft said, the answer
			// must not promise that nothing was applied.
			err = fmt.Errorf("%w: the backup was installed on the leader before: %v", ErrIndeterminate, err)
		}
		return BackupInfo{}, err
	}
	// The machine's last command index is the backup's, far below Raft's
	// applied index after the hole Restore leaves: a command entry now
	// brings every replica's machine past it (see AppliedThrough), before
	// RestoreBackupWith returns. (The woken leader loop below would tick too, since
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
	n.wakeLeaderLoop()
	n.log.Warn("cluster state restored from a backup", "backup_index", info.Index, "backup_term", info.Term, "locks", info.Locks)
	return info, nil
}

// SaveBackup writes a backup file to w (httpapi.Backups): Backup without
// the description.
func (n *Node) SaveBackup(ctx context.Context, w io.Writer) error {
	_, err := n.Backup(ctx, w)
	return err
}

// RestoreBackup restores a backup file read from r (httpapi.Backups):
// RestoreBackupWith with the one option the API has.
func (n *Node) RestoreBackup(ctx context.Context, r io.Reader, allowOtherCluster bool) error {
	_, err := n.RestoreBackupWith(ctx, r, RestoreOptions{AllowOtherCluster: allowOtherCluster})
	return err
}

// stepDownAfterRestore runs when raft.Restore failed on this leader: its
// state may be the backup's, uncommitted (settleRestore recorded it), and a
// leader in that state serves nothing until a later term settles it. It
// hands leadership to a follower so the cluster goes on under one whose
// state is the cluster's; it waits for nothing, so the node can still be
// stopped. A lone node cannot hand over: it says so.
func (n *Node) stepDownAfterRestore(cause error) {
	if !n.IsLeader() {
		return
	}
	n.log.Error("backup restore failed on the leader; stepping down", "error", cause)
	go func() {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			n.log.Error("cannot step down after a failed restore; this node serves no reads until a leader settles its state",
				"error", err)
		}
	}()
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
