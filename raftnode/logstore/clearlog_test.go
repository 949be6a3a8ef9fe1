package logstore

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

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

// emptyState is the snapshot of an empty state machine to these tests:
// restore (what raft would restore the machine from) accepts it alone.
var emptyState = []byte("empty state")

func restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if !bytes.Equal(b, emptyState) {
		return fmt.Errorf("cannot decode snapshot %q", b)
	}
	return nil
}

// addSnapshot saves a snapshot at index into dir's snapshot store: the
// state of an empty machine, or state itself when not nil. It returns the
// snapshot's id.
func addSnapshot(t *testing.T, dir string, index uint64, state []byte) string {
	t.Helper()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 5, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if state == nil {
		state = emptyState
	}
	if _, err := sink.Write(state); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return sink.ID()
}

// clearBelow runs ClearLogBelowSnapshot on dir's stores of kind, whose log
// holds 1..last, and returns its log (open; closed when the test ends) and
// what it logged.
func clearBelow(t *testing.T, dir, kind string) (raft.LogStore, string) {
	t.Helper()
	s := openStores(t, dir, kind)
	t.Cleanup(func() { s.close(t) })
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 5, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	log := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})
	if err := ClearLogBelowSnapshot(s.logs, snaps, restore, log); err != nil {
		t.Fatal(err)
	}
	return s.logs, out.String()
}

// withLog makes a data dir whose log of kind holds entries 1..last.
func withLog(t *testing.T, kind string, last uint64) string {
	t.Helper()
	dir := t.TempDir()
	s := openStores(t, dir, kind)
	if err := s.logs.StoreLogs(entries(1, last)); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	return dir
}

// A WAL that ends below the snapshot raft will start from is cleared (a
// kill between a snapshot install or restore and raft's log reset), and
// takes the entry after the snapshot, also after a reopen.
func TestClearLogBelowSnapshotClearsAWALItCovers(t *testing.T) {
	dir := withLog(t, WAL, 5)
	addSnapshot(t, dir, 3, nil)
	addSnapshot(t, dir, 8, nil)
	logs, out := clearBelow(t, dir, WAL)
	wantLog(t, logs, 0, 0)
	if !strings.Contains(out, "clearing the log") {
		t.Errorf("nothing logged about the clearing:\n%s", out)
	}
	if err := logs.StoreLogs(entries(9, 10)); err != nil {
		t.Fatalf("append after the snapshot: %v", err)
	}
}

// The log reaches the snapshot (or passes it): nothing is deleted, least of
// all an entry above the snapshot.
func TestClearLogBelowSnapshotKeepsALogThatReachesIt(t *testing.T) {
	for _, snap := range []uint64{3, 5} {
		dir := withLog(t, WAL, 5)
		addSnapshot(t, dir, snap, nil)
		logs, out := clearBelow(t, dir, WAL)
		wantLog(t, logs, 1, 5)
		if out != "" {
			t.Errorf("snapshot at %d: logged %s", snap, out)
		}
	}
}

// raft starts from the newest snapshot that opens and restores, and falls
// back to an older one that may need the log: the log is cleared only if
// the one raft will use is above it.
func TestClearLogBelowSnapshotGoesByTheSnapshotRaftWillUse(t *testing.T) {
	badCRC := func(t *testing.T, dir string, index uint64) {
		id := addSnapshot(t, dir, index, nil)
		state := filepath.Join(dir, "snapshots", id, "state.bin")
		b, err := os.ReadFile(state)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-1] ^= 0xff
		if err := os.WriteFile(state, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	undecodable := func(t *testing.T, dir string, index uint64) { addSnapshot(t, dir, index, []byte("not a snapshot")) }
	for name, spoil := range map[string]func(*testing.T, string, uint64){"bad crc": badCRC, "undecodable": undecodable} {
		t.Run(name, func(t *testing.T) {
			// The fallback is below the log's end: the log is kept.
			dir := withLog(t, WAL, 5)
			addSnapshot(t, dir, 3, nil)
			spoil(t, dir, 8)
			logs, out := clearBelow(t, dir, WAL)
			wantLog(t, logs, 1, 5)
			if !strings.Contains(out, "does not restore") {
				t.Errorf("nothing logged about the spoilt snapshot:\n%s", out)
			}

			// The fallback is above it too: cleared.
			dir = withLog(t, WAL, 5)
			addSnapshot(t, dir, 7, nil)
			spoil(t, dir, 8)
			logs, _ = clearBelow(t, dir, WAL)
			wantLog(t, logs, 0, 0)
		})
	}
}

// boltdb takes the gap (raft appends S+1 after L there): its log is left
// as it is. A WAL with no snapshot beside it is left as it is too.
func TestClearLogBelowSnapshotLeavesBoltDBAndSnapshotlessLogs(t *testing.T) {
	dir := withLog(t, BoltDB, 5)
	addSnapshot(t, dir, 8, nil)
	logs, out := clearBelow(t, dir, BoltDB)
	wantLog(t, logs, 1, 5)
	if out != "" {
		t.Errorf("boltdb: logged %s", out)
	}

	dir = withLog(t, WAL, 5)
	logs, _ = clearBelow(t, dir, WAL)
	wantLog(t, logs, 1, 5)
}

// A boltdb follower that installed a snapshot keeps the log's trailing
// entries below it (raft compacts only up to TrailingLogs before its last
// entry), and one stopped before its next append is upgraded to the WAL
// with a log that ends below the snapshot: the start that moves the log
// then clears it, and the WAL takes the entry after the snapshot.
func TestClearLogBelowSnapshotAfterMovingABoltDBLogToTheWAL(t *testing.T) {
	dir := withLog(t, BoltDB, 5)
	addSnapshot(t, dir, 8, nil)
	logs, out := clearBelow(t, dir, WAL)
	wantLog(t, logs, 0, 0)
	if !strings.Contains(out, "clearing the log") {
		t.Errorf("nothing logged about the clearing:\n%s", out)
	}
	if err := logs.StoreLogs(entries(9, 10)); err != nil {
		t.Fatalf("append after the snapshot: %v", err)
	}
}

// A truncated wal-meta.db is refused before raft-wal's bolt maps it (it
// died of SIGBUS), whichever log store the node is started with: boltdb
// opens the WAL too, to move the log out of it.
func TestOpenLogStoreRefusesTruncatedWALMeta(t *testing.T) {
	for _, kind := range []string{WAL, BoltDB} {
		dir := withLog(t, WAL, 5)
		if err := os.Truncate(filepath.Join(dir, walDir, "wal-meta.db"), 100); err != nil {
			t.Fatal(err)
		}
		s, err := tryOpenStores(dir, kind)
		if err == nil {
			s.close(t)
			t.Fatalf("%s: opened a log store on a truncated wal-meta.db", kind)
		}
		if !strings.Contains(err.Error(), "wal-meta.db is damaged") || !strings.Contains(err.Error(), "move the data dir aside") {
			t.Errorf("%s: %v", kind, err)
		}
	}
}
