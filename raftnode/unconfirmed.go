package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

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
//     screenSnapshot): no snapshot of committed state can.
//
// While unconfirmed the node says not ready and answers no read, stale ones
// too (restoreUnconfirmed), and it takes no entries from a batch that starts
// below R (screenAppend refuses it itself): so it never applies the cluster's
// entries on top of a state the cluster may not have. A leader whose log
// lacks the restore sees that refusal (watchedTransport.AppendEntries), and
// compacts its own log past it (compactPastRefused), so raft sends the node a
// snapshot. The record goes only on evidence:
//
//   - an AppendEntries whose previous entry, at or past R, matches this
//     node's own log (at R, the snapshot's term T) and whose leader commit
//     index is at least R: that leader's log holds the restore and has
//     committed it (screenAppend);
//   - a snapshot from the leader that is not past the commit it told: this
//     node's state is then the cluster's, whatever it was (screenSnapshot);
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
// installed nothing. It reports whether raft installed the backup.
func (n *Node) settleRestore(before uint64, err error) (installed bool) {
	r, t := n.unconfirmedPair()
	if err == nil {
		n.clearUnconfirmed(r, t, "the restore's own commit")
		return true
	}
	stats := n.raft.Stats()
	si, _ := strconv.ParseUint(stats["last_snapshot_index"], 10, 64)
	st, _ := strconv.ParseUint(stats["last_snapshot_term"], 10, 64)
	if si <= before {
		if r != 0 && r > before { // the record installBackup made for nothing
			n.clearUnconfirmed(r, t, "raft installed no restore")
		}
		return false
	}
	if si != r || st != t {
		if merr := n.markUnconfirmed(si, st, "restore installed, commit not seen: "+err.Error()); merr != nil {
			n.log.Error("the unconfirmed restore is recorded in memory only; a restart will not know of it", "error", merr)
		}
		return true
	}
	n.log.Warn("a backup restore reached this node's state but was not confirmed committed; "+
		"this node serves no reads and says not ready until it is, or until the leader's snapshot replaces it",
		"restore_index", si, "restore_term", st, "error", err)
	return true
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

// screenAppend sees every AppendEntries with a commit index (not heartbeats)
// before raft does (watchedTransport.forward). On a node unconfirmed at
// (R, T) it clears the record on the leader's evidence that the restore is
// committed in its log, and it answers itself, refusing, a batch of entries
// that starts below R: raft would apply them on top of a state the leader
// may not have. The refusal says Term = the request's (or this node's own
// if higher, as raft would: then the old leader steps down), LastLog = R,
// NoRetryBackoff false: the leader steps nextIndex back (replication.go:256,
// a back-off, not a step-down) and, its first entry being at or below
// LastLog, notes the batch for compactPastRefused.
func (n *Node) screenAppend(req *raft.AppendEntriesRequest) *raft.AppendEntriesResponse {
	if n.fsm.integrity.unconfirmedRestore.Load() == 0 {
		return nil // the common case: one atomic load per batch (the record was read before setScreens)
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

// screenSnapshot sees every InstallSnapshot before raft does. pastCommit: the
// snapshot reaches past the highest commit index this node's leader told it
// in the request's term (or it told none yet). Such a snapshot is recorded
// unconfirmed before raft installs it; an error means the record could not
// be made durable, and the RPC must be refused. The returned func, if any,
// is called with raft's answer (installed or not).
func (n *Node) screenSnapshot(req *raft.InstallSnapshotRequest, pastCommit bool) (func(installed bool), error) {
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
	n.snapshotMu.Lock() // never across a backup restore's install (installBackup)
	err = n.raft.Snapshot().Error()
	n.snapshotMu.Unlock()
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
