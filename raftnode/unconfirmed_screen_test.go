package raftnode

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/hashicorp/raft"
)

// The checks forward makes on a node whose state may rest on a backup
// restore the cluster has not committed (backup.go screenAppend,
// screenSnapshot), called directly on a node with a record made by hand.

func readRecord(t *testing.T, n *Node) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.cfg.DataDir, unconfirmedRestoreFile))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUnconfirmedScreenRefusesEntriesBelowRestoreUntilCommitted(t *testing.T) {
	n := startSingle(t, Config{})
	term := n.raft.CurrentTerm()
	r := n.raft.LastIndex() + 100 // past anything applied: no rule of the leader's clears it
	if err := n.markUnconfirmed(r, term, "test"); err != nil {
		t.Fatal(err)
	}
	if got, want := readRecord(t, n), strconv.FormatUint(r, 10)+" "+strconv.FormatUint(term, 10)+"\n"; got != want {
		t.Fatalf("record %q, want %q", got, want)
	}
	entries := []*raft.Log{{Index: r, Term: term + 1, Type: raft.LogNoop}}
	resp := n.screenAppend(&raft.AppendEntriesRequest{Term: term + 1, PrevLogEntry: r - 1, PrevLogTerm: term, LeaderCommitIndex: r + 5, Entries: entries})
	if resp == nil {
		t.Fatal("a batch of entries starting below the unconfirmed restore went to raft")
	}
	if resp.Success || resp.NoRetryBackoff || resp.LastLog != r || resp.Term != term+1 {
		t.Fatalf("refusal %+v: want Success false, NoRetryBackoff false, LastLog %d, Term %d", resp, r, term+1)
	}
	// What the leader's transport takes for "refused entries it claims to hold".
	if entries[0].Index > resp.LastLog {
		t.Fatal("the leader would not note this refusal")
	}
	if n.screenAppend(&raft.AppendEntriesRequest{Term: term + 1, PrevLogEntry: r - 1, PrevLogTerm: term, LeaderCommitIndex: r + 5}) != nil {
		t.Fatal("an AppendEntries without entries was refused")
	}
	for _, c := range []struct {
		prevTerm, commit uint64
		why              string
	}{
		{term, r - 1, "commit below the restore"},
		{term + 1, r + 5, "another term at the restore's index"},
	} {
		if n.screenAppend(&raft.AppendEntriesRequest{Term: term + 1, PrevLogEntry: r, PrevLogTerm: c.prevTerm, LeaderCommitIndex: c.commit, Entries: entries}) != nil {
			t.Fatalf("%s: a batch after the restore was refused", c.why)
		}
		if got := n.fsm.integrity.unconfirmedRestore.Load(); got != r {
			t.Fatalf("%s: record %d, want %d kept", c.why, got, r)
		}
	}
	if n.screenAppend(&raft.AppendEntriesRequest{Term: term + 1, PrevLogEntry: r, PrevLogTerm: term, LeaderCommitIndex: r}) != nil {
		t.Fatal("refused")
	}
	if got := n.fsm.integrity.unconfirmedRestore.Load(); got != 0 {
		t.Fatalf("the leader's log holds the restore and committed it, record still %d", got)
	}
	if got := readRecord(t, n); got != "" {
		t.Fatalf("record file still %q", got)
	}
}

func TestUnconfirmedScreenMatchesOwnEntryPastRestore(t *testing.T) {
	n := startSingle(t, Config{})
	var own raft.Log
	if err := n.logs.GetLog(2, &own); err != nil {
		t.Fatal(err)
	}
	if err := n.markUnconfirmed(1, 99, "test"); err != nil {
		t.Fatal(err)
	}
	n.screenAppend(&raft.AppendEntriesRequest{Term: own.Term, PrevLogEntry: 2, PrevLogTerm: own.Term + 1, LeaderCommitIndex: 5})
	if n.fsm.integrity.unconfirmedRestore.Load() != 1 {
		t.Fatal("cleared on a previous entry whose term is not this node's")
	}
	n.screenAppend(&raft.AppendEntriesRequest{Term: own.Term, PrevLogEntry: 2, PrevLogTerm: own.Term, LeaderCommitIndex: 5})
	if got := n.fsm.integrity.unconfirmedRestore.Load(); got != 0 {
		t.Fatalf("matching own entry at 2 with commit 5: record %d kept", got)
	}
}

func TestUnconfirmedScreenSnapshotPastCommit(t *testing.T) {
	n := startSingle(t, Config{})
	snap := &raft.InstallSnapshotRequest{Term: 7, LastLogIndex: 500, LastLogTerm: 6}
	after, err := n.screenSnapshot(snap, true)
	if err != nil || after == nil {
		t.Fatalf("screenSnapshot: %v", err)
	}
	if got := readRecord(t, n); got != "500 6\n" {
		t.Fatalf("before raft installs a snapshot past the commit, record %q, want \"500 6\\n\"", got)
	}
	after(false)
	if got := n.fsm.integrity.unconfirmedRestore.Load(); got != 0 || readRecord(t, n) != "" {
		t.Fatalf("raft refused the snapshot, record %d / %q kept", got, readRecord(t, n))
	}
	// With an earlier record, a refused install puts it back.
	if err := n.markUnconfirmed(300, 5, "test"); err != nil {
		t.Fatal(err)
	}
	after, _ = n.screenSnapshot(snap, true)
	after(false)
	if r, tm := n.unconfirmedPair(); r != 300 || tm != 5 || readRecord(t, n) != "300 5\n" {
		t.Fatalf("record (%d, %d) %q after a refused install, want (300, 5)", r, tm, readRecord(t, n))
	}
	// A snapshot within the leader's commit replaces the state once installed.
	after, _ = n.screenSnapshot(&raft.InstallSnapshotRequest{Term: 7, LastLogIndex: 200, LastLogTerm: 6}, false)
	if n.fsm.integrity.unconfirmedRestore.Load() != 300 {
		t.Fatal("cleared before raft installed the snapshot")
	}
	after(false)
	if n.fsm.integrity.unconfirmedRestore.Load() != 300 {
		t.Fatal("cleared though raft did not install the snapshot")
	}
	after, _ = n.screenSnapshot(&raft.InstallSnapshotRequest{Term: 7, LastLogIndex: 200, LastLogTerm: 6}, false)
	after(true)
	if got := n.fsm.integrity.unconfirmedRestore.Load(); got != 0 || readRecord(t, n) != "" {
		t.Fatalf("the leader's snapshot within its commit installed, record %d / %q kept", got, readRecord(t, n))
	}
}
