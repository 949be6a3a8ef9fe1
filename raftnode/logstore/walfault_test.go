package logstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// faultyVFS is the WAL's file system (privateVFS over raft-wal's fs, as
// openWAL builds it) with failures to switch on: an fsync that fails (EIO,
// as a failing or full disk answers) and a segment file that cannot be
// made (ENOSPC: raft-wal preallocates 64 MiB for each new segment).
type faultyVFS struct {
	privateVFS
	failSync   *atomic.Bool
	failCreate *atomic.Bool
}

func (v faultyVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	if v.failCreate.Load() {
		return nil, &fs.PathError{Op: "fallocate", Path: filepath.Join(dir, name), Err: syscall.ENOSPC}
	}
	f, err := v.privateVFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return faultyFile{f, v.failSync}, nil
}

func (v faultyVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.privateVFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return faultyFile{f, v.failSync}, nil
}

type faultyFile struct {
	types.WritableFile
	failSync *atomic.Bool
}

func (f faultyFile) Sync() error {
	if f.failSync.Load() {
		return &fs.PathError{Op: "fsync", Path: "segment", Err: syscall.EIO}
	}
	return f.WritableFile.Sync()
}

// openFaultyWAL opens the WAL exactly as openWAL does, but on faultyVFS
// (also when the store reopens it after a failed write).
func openFaultyWAL(t *testing.T, path string, v faultyVFS) *walStore {
	t.Helper()
	s, err := openWALOn(path, hclog.NewNullLogger(), v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newFaultyVFS() faultyVFS {
	return faultyVFS{privateVFS: privateVFS{walfs.New()}, failSync: new(atomic.Bool), failCreate: new(atomic.Bool)}
}

// bigEntries are entries from..to with a 1 MiB payload each, so that a few
// dozen of them fill a 64 MiB segment and make the WAL rotate.
func bigEntries(from, to uint64) []*raft.Log {
	var ls []*raft.Log
	for i := from; i <= to; i++ {
		l := entry(i)
		l.Data = append(append([]byte{}, l.Data...), make([]byte, 1<<20)...)
		ls = append(ls, l)
	}
	return ls
}

// One failed write leaves raft-wal's log unable to take any append until
// the process restarts, though the disk works again. With boltdb the failed
// transaction rolls back and the next append goes through.
//
// What raft does after a failed StoreLogs is to store the same entries again:
// a follower answers the AppendEntries with failure and the leader resends
// from the same index; a leader steps down (ErrStorage to the client, who is
// told to resend) and appends at the same index when it leads again. So a
// node whose disk hiccups once (an fsync EIO, a full disk at the moment a
// new 64 MiB segment is preallocated) stops taking log entries for good: as
// a follower it never catches up again, a single-node cluster never writes
// again, and a 3-node cluster runs one failure from losing its quorum; only
// a restart of the process cures it.
//
//   - fsync fails once: raft-wal's segment writer has already counted the
//     batch's entries in memory, so the retry is "non-monotonic append to
//     segment" from then on.
//   - the next segment cannot be created at rotation: the rotation runs in
//     the background, only logs its error, and is never tried again; the
//     tail segment stays sealed and every append is ErrSealed.
//
// Expected: once the fault is gone, the retried append succeeds.
// Observed: it fails, every time, until the WAL is reopened.
func TestWALTransientWriteErrorHealsOnRetry(t *testing.T) {
	t.Run("fsync fails once", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), walDir)
		v := newFaultyVFS()
		w := openFaultyWAL(t, dir, v)
		if err := w.StoreLogs(entries(1, 10)); err != nil {
			t.Fatal(err)
		}
		v.failSync.Store(true)
		if err := w.StoreLogs(entries(11, 20)); err == nil {
			t.Fatal("append with a failing fsync succeeded")
		}
		v.failSync.Store(false)
		if _, last, _ := span(w); last != 10 {
			t.Fatalf("after the failed append the log ends at %d, want 10", last)
		}
		var errs []string
		for try := 0; try < 3; try++ { // raft resends the same entries
			if err := w.StoreLogs(entries(11, 20)); err != nil {
				errs = append(errs, err.Error())
			}
		}
		w.Close()
		if len(errs) > 0 {
			// Reopened, the same store takes the append: the wedge is in memory.
			w2 := openFaultyWAL(t, dir, newFaultyVFS())
			_, last, _ := span(w2)
			w2.Close()
			t.Fatalf("the disk works again but the WAL refuses every retry of the append (%d of 3): %s\n"+
				"(reopened, the log ends at %d: only a restart clears it)", len(errs), strings.Join(errs, "; "), last)
		}
	})

	t.Run("new segment cannot be created at rotation", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), walDir)
		v := newFaultyVFS()
		w := openFaultyWAL(t, dir, v)
		defer func() { w.Close() }()
		v.failCreate.Store(true)
		// 64 MiB of entries: the append that fills the segment seals it and
		// hands the rotation to raft-wal's background goroutine.
		var next uint64 = 1
		for i := 0; i < 80; i++ {
			err := w.StoreLogs(bigEntries(next, next))
			if err != nil {
				break
			}
			next++
		}
		v.failCreate.Store(false) // the disk has room again
		var err error
		for try := 0; try < 3; try++ {
			if err = w.StoreLogs(entries(next, next)); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("the disk has room again but every append is refused after entry %d: %v (errors.Is ErrSealed: %v)",
				next-1, err, errors.Is(err, wal.ErrSealed))
		}
		if next > 70 {
			t.Fatalf("no rotation after %d MiB: the test did not reach a segment boundary", next-1)
		}
	})
}

// wal-meta.db is the WAL's table of contents: which segment files make up
// the log and where each begins and ends. Lost (deleted, or a restore of the
// data dir that missed it), raft-wal starts a new, empty log and deletes
// every segment file it finds as a leftover, and raftlock starts on that:
// raft.db still holds the term, so CheckVoteRecord passes. The node's log is
// gone without a word, and with it every entry it acknowledged past its
// last snapshot; it can then vote for a candidate that lacks entries it had
// acknowledged, which is how a committed write is lost. The same loss of
// raft.db is refused ("no vote record"); this is not.
//
// (When the first segment starts at index 1 the open fails by chance: the
// new empty segment's file name is taken. After a snapshot install, the
// usual state of a follower, it is not.)
//
// Expected: opening the data dir fails and the segment files are kept.
// Observed: it opens with an empty log and the segments are deleted.
func TestWALLostMetaDBRefusedAndSegmentsKept(t *testing.T) {
	dir := t.TempDir()
	s := openStores(t, dir, WAL)
	if err := s.logs.StoreLogs(entries(1, 50)); err != nil {
		t.Fatal(err)
	}
	// A follower's log after a snapshot install (raft's removeOldLogs clears
	// it) and more appends: its segment file no longer starts at index 1.
	if err := s.logs.DeleteRange(1, 50); err != nil {
		t.Fatal(err)
	}
	if err := s.logs.StoreLogs(entries(51, 80)); err != nil {
		t.Fatal(err)
	}
	if err := s.bolt.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	segs, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	if len(segs) == 0 {
		t.Fatal("no segment files")
	}
	if err := os.Remove(filepath.Join(dir, walDir, "wal-meta.db")); err != nil {
		t.Fatal(err)
	}

	// Refused whichever store the node is to use: with boltdb, the start
	// would otherwise take "no wal-meta.db" for "no WAL" and begin on an
	// empty log.
	for _, kind := range []string{WAL, BoltDB} {
		s2, err := tryOpenStores(dir, kind)
		if err != nil {
			t.Logf("%s: refused, as it should: %v", kind, err)
			continue
		}
		_, last, _ := span(s2.logs)
		s2.close(t)
		t.Fatalf("%s: with wal-meta.db gone the data dir opened with a log ending at %d (it held 51..80)", kind, last)
	}
	for _, seg := range segs {
		if _, err := os.Stat(seg); err != nil {
			t.Fatalf("a refused start lost segment file %s: %v", seg, err)
		}
	}
}

// failingMeta is raft-wal's meta database whose commits fail once armed:
// on disk, exactly what a kill -9 just before a commit leaves.
type failingMeta struct {
	*metadb.BoltMetaDB
	fail *atomic.Bool
}

func (m failingMeta) CommitState(s types.PersistentState) error {
	if m.fail.Load() {
		return errors.New("killed before the meta commit")
	}
	return m.BoltMetaDB.CommitState(s)
}

// raft-wal seals a full segment inside the append that fills it (the index
// block goes out with that batch's fsync) and records the rotation (tail
// sealed, next segment) in wal-meta.db afterwards, on a background
// goroutine. A kill -9 between the two (once per 64 MiB of log) leaves the
// meta saying the tail is open while the file holds its index block. On
// open, raft-wal recovers that tail by scanning, finds the index frame and
// so treats the writer as sealed, but never rotates it (only StoreLogs
// triggers a rotation, after an append that succeeded): every append is
// ErrSealed, at this start and every later one. The node cannot take a log
// entry again. (Starting it once with --log-store boltdb moves the log out
// and appends work again: checked by hand, not asserted here.)
//
// Expected: after the restart the next entry is appended.
// Observed: "segment is sealed", on every start.
func TestWALKilledBeforeRotationCommitStillAppends(t *testing.T) {
	dataDir := t.TempDir()
	path := filepath.Join(dataDir, walDir)
	if err := os.MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
	fail := new(atomic.Bool)
	meta := failingMeta{&metadb.BoltMetaDB{}, fail}
	w, err := wal.Open(path, wal.WithLogger(hclog.NewNullLogger()), wal.WithMetaStore(meta),
		wal.WithSegmentFiler(indexlessSealFiler{segment.NewFiler(path, privateVFS{walfs.New()})}))
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true) // from here on, the process "dies" before any meta commit
	var next uint64 = 1
	for ; next < 80; next++ {
		if err := w.StoreLogs(bigEntries(next, next)); err != nil {
			break // the rotation did not happen: the segment stays sealed
		}
	}
	if next >= 80 {
		t.Fatal("no segment filled in 80 MiB")
	}
	w.Close()
	meta.BoltMetaDB.Close()
	acked := next - 1 // every append up to here returned nil: raft was told they are stored

	var failed []string
	for start := 1; start <= 3; start++ {
		s, err := tryOpenStores(dataDir, WAL)
		if err != nil {
			t.Fatalf("start %d: %v", start, err)
		}
		_, last, _ := span(s.logs)
		err = s.logs.StoreLogs(entries(last+1, last+1))
		s.close(t)
		if last != acked {
			t.Fatalf("start %d: log ends at %d, but %d appends were acknowledged", start, last, acked)
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("start %d: log ends at %d, next append: %v (ErrSealed: %v)", start, last, err, errors.Is(err, wal.ErrSealed)))
		} else {
			acked++ // this start's append was acknowledged too: the next start must hold it
		}
	}
	if len(failed) > 0 {
		t.Fatalf("after a kill between sealing a segment and recording its rotation, %d of 3 starts cannot append:\n%s",
			len(failed), strings.Join(failed, "\n"))
	}
}

// The append that fills a segment writes its entries, the segment's index
// block and the batch's commit frame in one write and one fsync. A crash
// (power cut, or kill -9 cutting the write short) that loses the commit
// frame tears that batch: it was never acknowledged, and raft-wal's
// recovery drops it and rewinds to the batch before, as for any torn tail
// (TestWALTornTail). But the scan that finds the commit frames also saw the
// index frame and left the writer marked sealed, though it rewound past
// it: every append is then ErrSealed, at every start.
//
// Expected: the log ends at the last whole batch and takes the next append.
// Observed: "segment is sealed" on every start.
func TestWALTornSealingBatchStillAppends(t *testing.T) {
	dataDir := t.TempDir()
	path := filepath.Join(dataDir, walDir)
	if err := os.MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
	fail := new(atomic.Bool)
	meta := failingMeta{&metadb.BoltMetaDB{}, fail}
	w, err := wal.Open(path, wal.WithLogger(hclog.NewNullLogger()), wal.WithMetaStore(meta),
		wal.WithSegmentFiler(indexlessSealFiler{segment.NewFiler(path, privateVFS{walfs.New()})}))
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true) // the crash comes before the rotation is recorded
	var next uint64 = 1
	for ; next < 80; next++ {
		if err := w.StoreLogs(bigEntries(next, next)); err != nil {
			break
		}
	}
	if next >= 80 {
		t.Fatal("no segment filled in 80 MiB")
	}
	w.Close()
	meta.BoltMetaDB.Close()
	sealing := next - 1 // the entry whose batch sealed the segment

	// Tear that batch: its commit frame (the last 8-byte frame written)
	// never reached the disk.
	seg, end := segmentFile(t, dataDir)
	end = (end + 7) &^ 7
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fh [8]byte
	if _, err := f.ReadAt(fh[:], end-8); err != nil || fh[0] != 3 /* FrameCommit */ {
		t.Fatalf("last frame at %d is not a commit frame: %x, %v", end-8, fh, err)
	}
	if _, err := f.WriteAt(make([]byte, 8), end-8); err != nil {
		t.Fatal(err)
	}
	f.Close()

	var failed []string
	want := sealing - 1
	for start := 1; start <= 2; start++ {
		s, err := tryOpenStores(dataDir, WAL)
		if err != nil {
			t.Fatalf("start %d: %v", start, err)
		}
		_, last, _ := span(s.logs)
		err = s.logs.StoreLogs(entries(last+1, last+1))
		s.close(t)
		if last != want {
			t.Fatalf("start %d: log ends at %d, want %d (the torn batch dropped)", start, last, want)
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("start %d: log ends at %d, next append: %v", start, last, err))
		} else {
			want++ // this start's append was acknowledged: the next start must hold it
		}
	}
	if len(failed) > 0 {
		t.Fatalf("after a torn write of the batch that filled a segment, the torn batch is dropped but no append is taken:\n%s",
			strings.Join(failed, "\n"))
	}
}

// Each time raft clears a log suffix (a follower dropping entries a new
// leader never committed: any leader change with writes in flight),
// raft-wal v0.4.0 seals the tail segment where it stands and starts a new
// one, preallocated to 64 MiB. The old segments stay until compaction
// passes them, which with the defaults (SnapshotThreshold 8192,
// TrailingLogs 10240) is thousands of entries later. A few leader changes
// under load thus take GiBs of disk for a log of a few KiB, and a full
// disk is what wedges the WAL (TestWALTransientWriteErrorHealsOnRetry:
// a segment that cannot be created at rotation or at the next clearing).
//
// Expected: disk use bounded by the log, not by the number of clearings
// (here: under 3 segments' worth for a 180-entry log).
// Observed: one 64 MiB segment per clearing (about 1.3 GiB after 20).
func TestWALSuffixClearingsDiskBounded(t *testing.T) {
	dir := t.TempDir()
	s := openStores(t, dir, WAL)
	var last uint64
	for c := 0; c < 20; c++ {
		if err := s.logs.StoreLogs(entries(last+1, last+10)); err != nil {
			t.Fatal(err)
		}
		last += 10
		// The new leader never had the last entry: it goes.
		if err := s.logs.DeleteRange(last, last); err != nil {
			t.Fatal(err)
		}
		last--
	}
	s.close(t)
	segs, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	var allocated int64
	for _, seg := range segs {
		fi, err := os.Stat(seg)
		if err != nil {
			t.Fatal(err)
		}
		allocated += fi.Sys().(*syscall.Stat_t).Blocks * 512
	}
	if limit := int64(3 * wal.DefaultSegmentSize); allocated > limit {
		t.Fatalf("a %d-entry log after 20 suffix clearings takes %d segment files and %d MiB of disk (limit %d MiB)",
			last, len(segs), allocated>>20, limit>>20)
	}
}
