package logstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// entry is a command entry whose payload names its index, so a byte of it
// is easy to find in a segment file, with extensions (which raftlock uses
// for the entry's checksum) that must come back as stored too.
func entry(i uint64) *raft.Log {
	data := []byte(fmt.Sprintf("acquire lock-%06d lease L ttl 1000", i))
	return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data,
		Extensions: binary.BigEndian.AppendUint32([]byte{1}, crc32.ChecksumIEEE(data))}
}

func entries(from, to uint64) []*raft.Log {
	var ls []*raft.Log
	for i := from; i <= to; i++ {
		ls = append(ls, entry(i))
	}
	return ls
}

// stores is one open data dir: raft.db and the log store of a kind.
type stores struct {
	bolt   *raftboltdb.BoltStore
	logs   raft.LogStore
	closer io.Closer
}

func openStores(t *testing.T, dir, kind string) *stores {
	t.Helper()
	s, err := tryOpenStores(dir, kind)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tryOpenStores(dir, kind string) (*stores, error) {
	bolt, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		return nil, err
	}
	logs, c, err := Open(dir, kind, bolt, hclog.NewNullLogger())
	if err != nil {
		bolt.Close()
		return nil, err
	}
	return &stores{bolt: bolt, logs: logs, closer: c}, nil
}

func (s *stores) close(t *testing.T) {
	t.Helper()
	if err := s.closer.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.bolt.Close(); err != nil {
		t.Fatal(err)
	}
}

// wantLog checks that logs holds exactly the entries from..to, each intact
// (payload and extensions).
func wantLog(t *testing.T, logs raft.LogStore, from, to uint64) {
	t.Helper()
	first, last, err := span(logs)
	if err != nil {
		t.Fatal(err)
	}
	if first != from || last != to {
		t.Fatalf("log holds %d..%d, want %d..%d", first, last, from, to)
	}
	for i := from; i <= to && to > 0; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		want := entry(i)
		if l.Index != i || l.Term != want.Term || l.Type != want.Type || !bytes.Equal(l.Data, want.Data) || !bytes.Equal(l.Extensions, want.Extensions) {
			t.Fatalf("entry %d read back as %+v, want %+v", i, l, want)
		}
	}
}

// wantGone checks that a compacted entry is no longer served: the leader
// must then send its snapshot to a follower that needs it.
func wantGone(t *testing.T, logs raft.LogStore, index uint64) {
	t.Helper()
	var l raft.Log
	if err := logs.GetLog(index, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("compacted entry %d: GetLog = %v, want ErrLogNotFound", index, err)
	}
}

func TestLogStoreAppendReadReopen(t *testing.T) {
	for _, kind := range []string{WAL, BoltDB} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			s := openStores(t, dir, kind)
			wantLog(t, s.logs, 0, 0)
			if err := s.logs.StoreLogs(entries(1, 100)); err != nil {
				t.Fatal(err)
			}
			if err := s.logs.StoreLog(entry(101)); err != nil {
				t.Fatal(err)
			}
			if err := s.bolt.SetUint64([]byte("CurrentTerm"), 7); err != nil {
				t.Fatal(err)
			}
			wantLog(t, s.logs, 1, 101)
			s.close(t)

			s = openStores(t, dir, kind)
			wantLog(t, s.logs, 1, 101)
			if term, err := s.bolt.GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
				t.Fatalf("stable store after reopen: term %d, %v", term, err)
			}
			// Compaction from the head, as after a snapshot, then more appends.
			if err := s.logs.DeleteRange(1, 50); err != nil {
				t.Fatal(err)
			}
			wantGone(t, s.logs, 50)
			if err := s.logs.StoreLogs(entries(102, 110)); err != nil {
				t.Fatal(err)
			}
			s.close(t)

			s = openStores(t, dir, kind)
			defer s.close(t)
			wantLog(t, s.logs, 51, 110)
			wantGone(t, s.logs, 1)
			_, err := os.Stat(filepath.Join(dir, walDir))
			if hasWAL := err == nil; hasWAL != (kind == WAL) {
				t.Fatalf("kind %s: wal dir present = %v", kind, hasWAL)
			}
			// Every file of the log is private: it holds the lease ids.
			_ = filepath.WalkDir(filepath.Join(dir, walDir), func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				fi, err := d.Info()
				if err != nil {
					return err
				}
				want := fs.FileMode(0o600)
				if d.IsDir() {
					want = 0o700
				}
				if fi.Mode().Perm() != want {
					t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), want)
				}
				return nil
			})
		})
	}
}

// hidden wraps a log store the way the error guard and test hooks do:
// embedding the interface, which hides IsMonotonic.
type hidden struct{ raft.LogStore }

// The WAL asks for contiguous appends; raft must learn that through the
// wrappers and the cache, so it clears the log after a snapshot install.
func TestLogStoreWALIsMonotonicThroughWrappers(t *testing.T) {
	s := openStores(t, t.TempDir(), WAL)
	defer s.close(t)
	cache, err := raft.NewLogCache(16, KeepMonotonic(s.logs, hidden{s.logs}))
	if err != nil {
		t.Fatal(err)
	}
	if !cache.IsMonotonic() {
		t.Fatal("wal behind a wrapper and LogCache does not report IsMonotonic")
	}
	b := openStores(t, t.TempDir(), BoltDB)
	defer b.close(t)
	if _, ok := KeepMonotonic(b.logs, hidden{b.logs}).(raft.MonotonicLogStore); ok {
		t.Fatal("boltdb reports IsMonotonic")
	}
}

// An existing boltdb data dir started with --log-store wal moves its log into
// the WAL, and back again; raft.db's stable store is untouched both ways.
func TestLogStoreMigratesBothWays(t *testing.T) {
	dir := t.TempDir()
	s := openStores(t, dir, BoltDB)
	if err := s.logs.StoreLogs(entries(5, 2500)); err != nil { // more than one migration batch
		t.Fatal(err)
	}
	if err := s.bolt.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	s.close(t)

	s = openStores(t, dir, WAL)
	wantLog(t, s.logs, 5, 2500)
	wantLog(t, s.bolt, 0, 0) // dropped from raft.db
	if err := s.logs.StoreLogs(entries(2501, 2510)); err != nil {
		t.Fatal(err)
	}
	s.close(t)

	s = openStores(t, dir, BoltDB)
	wantLog(t, s.logs, 5, 2510)
	if _, err := os.Stat(filepath.Join(dir, walDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("wal dir still there after moving back to boltdb: %v", err)
	}
	if term, err := s.bolt.GetUint64([]byte("CurrentTerm")); err != nil || term != 3 {
		t.Fatalf("stable store: term %d, %v", term, err)
	}
	s.close(t)
}

// A follower on boltdb that installed a snapshot keeps its older entries
// below it, then a gap: only the run after the gap moves.
func TestLogStoreMigrationSkipsEntriesBeforeGap(t *testing.T) {
	dir := t.TempDir()
	s := openStores(t, dir, BoltDB)
	if err := s.logs.StoreLogs(append(entries(1, 10), entries(20, 30)...)); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	s = openStores(t, dir, WAL)
	defer s.close(t)
	wantLog(t, s.logs, 20, 30)
}

// A migration cut off at any step (kill -9) leaves one whole log, and the
// next start finishes or redoes it.
func TestLogStoreMigrationCutShort(t *testing.T) {
	// boltdb dir with entries 1..300 and term 9.
	boltDir := func(t *testing.T) string {
		dir := t.TempDir()
		s := openStores(t, dir, BoltDB)
		if err := s.logs.StoreLogs(entries(1, 300)); err != nil {
			t.Fatal(err)
		}
		if err := s.bolt.SetUint64([]byte("CurrentTerm"), 9); err != nil {
			t.Fatal(err)
		}
		s.close(t)
		return dir
	}
	// partialWAL writes entries from..to into a WAL at dir/name.
	partialWAL := func(t *testing.T, dir, name string, from, to uint64) {
		w, err := openWAL(filepath.Join(dir, name), hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		if err := w.StoreLogs(entries(from, to)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(t *testing.T, dir, kind string) {
		s := openStores(t, dir, kind)
		defer s.close(t)
		wantLog(t, s.logs, 1, 300)
		if kind == WAL {
			wantLog(t, s.bolt, 0, 0)
		}
		for _, d := range []string{walStaging, walDropped} {
			if _, err := os.Stat(filepath.Join(dir, d)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s left behind: %v", d, err)
			}
		}
		if term, err := s.bolt.GetUint64([]byte("CurrentTerm")); err != nil || term != 9 {
			t.Fatalf("stable store: term %d, %v", term, err)
		}
	}

	t.Run("to wal, killed while copying", func(t *testing.T) {
		dir := boltDir(t)
		partialWAL(t, dir, walStaging, 1, 120)
		check(t, dir, WAL)
	})
	t.Run("to wal, killed while copying, then started as boltdb", func(t *testing.T) {
		dir := boltDir(t)
		partialWAL(t, dir, walStaging, 1, 120)
		check(t, dir, BoltDB)
	})
	t.Run("to wal, killed after the rename, before raft.db was cleared", func(t *testing.T) {
		dir := boltDir(t)
		partialWAL(t, dir, walDir, 1, 300)
		check(t, dir, WAL)
	})
	t.Run("to boltdb, killed while copying", func(t *testing.T) {
		dir := t.TempDir()
		partialWAL(t, dir, walDir, 1, 300)
		s := openStores(t, dir, BoltDB) // completes: now the partial state by hand
		if err := s.bolt.SetUint64([]byte("CurrentTerm"), 9); err != nil {
			t.Fatal(err)
		}
		if err := s.bolt.DeleteRange(150, 300); err != nil {
			t.Fatal(err)
		}
		s.close(t)
		partialWAL(t, dir, walDir, 1, 300)
		check(t, dir, BoltDB)
	})
	t.Run("to boltdb, killed after the rename, before the delete", func(t *testing.T) {
		dir := boltDir(t)
		partialWAL(t, dir, walDropped, 1, 300)
		check(t, dir, BoltDB)
	})
}

// segmentFile is the WAL's one segment file and the offset just past the
// last byte written to it (the file is preallocated with zeros).
func segmentFile(t *testing.T, dir string) (string, int64) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	if err != nil || len(names) != 1 {
		t.Fatalf("segment files: %v, %v", names, err)
	}
	b, err := os.ReadFile(names[0])
	if err != nil {
		t.Fatal(err)
	}
	end := int64(len(b))
	for end > 0 && b[end-1] == 0 {
		end--
	}
	return names[0], end
}

// walWithBatches writes entries 1..30 as three batches (three fsyncs) and
// returns the dir and the segment's written length after the second batch.
func walWithBatches(t *testing.T) (string, int64) {
	dir := t.TempDir()
	s := openStores(t, dir, WAL)
	for _, b := range [][2]uint64{{1, 10}, {11, 20}} {
		if err := s.logs.StoreLogs(entries(b[0], b[1])); err != nil {
			t.Fatal(err)
		}
	}
	_, twoBatches := segmentFile(t, dir)
	if err := s.logs.StoreLogs(entries(21, 30)); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	return dir, twoBatches
}

// kill -9 or a power cut during an append leaves the last batch torn. That
// batch was never acknowledged (StoreLogs had not returned: its fsync comes
// after the write), so dropping it is safe. raft-wal checks the last
// batch's CRC-32C on open and rewinds to the batch before; later appends
// carry on from there.
func TestWALTornTail(t *testing.T) {
	damage := map[string]func(t *testing.T, seg string, twoBatches, end int64){
		// The file ends inside the last batch's records.
		"truncated mid-record": func(t *testing.T, seg string, twoBatches, end int64) {
			if err := os.Truncate(seg, twoBatches+(end-twoBatches)/2); err != nil {
				t.Fatal(err)
			}
		},
		// The last batch's tail never reached the disk: zeros, as preallocated.
		"zeroed tail": func(t *testing.T, seg string, twoBatches, end int64) {
			f, err := os.OpenFile(seg, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(make([]byte, 20), end-20); err != nil {
				t.Fatal(err)
			}
		},
		// A torn sector inside the last batch: the commit frame survived but
		// the data under its CRC did not.
		"garbled last batch": func(t *testing.T, seg string, twoBatches, end int64) {
			flipByte(t, seg, []byte("lock-000025"))
		},
	}
	for name, f := range damage {
		t.Run(name, func(t *testing.T) {
			dir, twoBatches := walWithBatches(t)
			seg, end := segmentFile(t, dir)
			f(t, seg, twoBatches, end)

			s := openStores(t, dir, WAL)
			wantLog(t, s.logs, 1, 20)
			if err := s.logs.StoreLogs(entries(21, 25)); err != nil {
				t.Fatalf("append after recovery: %v", err)
			}
			s.close(t)
			s = openStores(t, dir, WAL)
			defer s.close(t)
			wantLog(t, s.logs, 1, 25)
		})
	}
}

// flipByte changes one byte of the only occurrence of marker in file.
func flipByte(t *testing.T, file string, marker []byte) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, marker)
	if i < 0 || bytes.Count(b, marker) != 1 {
		t.Fatalf("%q found %d times in %s", marker, bytes.Count(b, marker), file)
	}
	b[i+len(marker)-1] ^= 0x01
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOpenLogStoreUnknownKind(t *testing.T) {
	if _, err := tryOpenStores(t.TempDir(), "sqlite"); err == nil {
		t.Fatal("unknown kind accepted")
	}
}

// A follower clears a log suffix that a new leader never committed, then
// appends the leader's entries there (raft's appendEntries: DeleteRange from
// the first conflict to the last index). raft-wal v0.4.0 then leaves the old
// tail segment sealed without an index block, and before the workaround
// (indexlessSealFiler) the next start failed: "sealed segment has no index
// block" (hashicorp/raft-wal#31). Twice, with restarts between, and the
// entries read back must be the new ones, never the cleared suffix.
func TestWALSuffixClearedSurvivesRestarts(t *testing.T) {
	dir := t.TempDir()
	rewritten := func(from, to uint64, term uint64) []*raft.Log {
		ls := entries(from, to)
		for _, l := range ls {
			l.Term = term
		}
		return ls
	}
	wantTerms := func(s *stores, last uint64, terms map[uint64]uint64) {
		t.Helper()
		first, got, err := span(s.logs)
		if err != nil || first != 1 || got != last {
			t.Fatalf("log holds %d..%d (err %v), want 1..%d", first, got, err, last)
		}
		for i := uint64(1); i <= last; i++ {
			var l raft.Log
			if err := s.logs.GetLog(i, &l); err != nil {
				t.Fatalf("entry %d: %v", i, err)
			}
			want := uint64(1)
			for from, term := range terms {
				if i >= from {
					want = max(want, term)
				}
			}
			if l.Index != i || l.Term != want || !bytes.Equal(l.Data, entry(i).Data) {
				t.Fatalf("entry %d read back as index %d term %d, want term %d", i, l.Index, l.Term, want)
			}
		}
	}

	s := openStores(t, dir, WAL)
	for _, b := range [][2]uint64{{1, 5}, {6, 10}} {
		if err := s.logs.StoreLogs(entries(b[0], b[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.logs.DeleteRange(8, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.logs.StoreLogs(rewritten(8, 12, 2)); err != nil {
		t.Fatal(err)
	}
	wantTerms(s, 12, map[uint64]uint64{8: 2})
	s.close(t)

	s = openStores(t, dir, WAL)
	wantTerms(s, 12, map[uint64]uint64{8: 2})
	// Again inside the segment made by the first clearing.
	if err := s.logs.DeleteRange(11, 12); err != nil {
		t.Fatal(err)
	}
	if err := s.logs.StoreLogs(rewritten(11, 15, 3)); err != nil {
		t.Fatal(err)
	}
	s.close(t)

	s = openStores(t, dir, WAL)
	wantTerms(s, 15, map[uint64]uint64{8: 2, 11: 3})
	if err := s.logs.StoreLogs(rewritten(16, 20, 3)); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	s = openStores(t, dir, WAL)
	defer s.close(t)
	wantTerms(s, 20, map[uint64]uint64{8: 2, 11: 3})
}
