package logstore

import (
	"bytes"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
)

// A reopen after a failed write swaps the WAL under readers: replication
// goroutines call GetLog at any time. Run with -race. Every read must give
// the stored entry (never an error or a closed WAL), and after each failure
// the retried append goes through.
func TestWALStoreReopenAfterFailedWriteUnderConcurrentReads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), walDir)
	v := newFaultyVFS()
	w := openFaultyWAL(t, dir, v)
	defer w.Close()
	if err := w.StoreLogs(entries(1, 50)); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			for i := uint64(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				idx := 1 + (i*7+uint64(r))%50
				var l raft.Log
				if err := w.GetLog(idx, &l); err != nil {
					errs <- err
					return
				}
				if want := entry(idx); l.Index != idx || !bytes.Equal(l.Data, want.Data) {
					errs <- &entryMismatch{idx, l.Index}
					return
				}
				if _, err := w.LastIndex(); err != nil {
					errs <- err
					return
				}
			}
		}(r)
	}

	next := uint64(51)
	for round := 0; round < 5; round++ {
		v.failSync.Store(true)
		if err := w.StoreLogs(entries(next, next+4)); err == nil {
			t.Fatal("append with a failing fsync succeeded")
		}
		v.failSync.Store(false)
		if err := w.StoreLogs(entries(next, next+4)); err != nil {
			t.Fatalf("round %d: retry after the disk healed: %v", round, err)
		}
		next += 5
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("a read during the reopens: %v", err)
	default:
	}
	if first, last, err := span(w); err != nil || first != 1 || last != next-1 {
		t.Fatalf("span %d..%d (%v), want 1..%d", first, last, err, next-1)
	}
	for i := uint64(1); i < next; i++ {
		var l raft.Log
		if err := w.GetLog(i, &l); err != nil || !bytes.Equal(l.Data, entry(i).Data) {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
}

type entryMismatch struct{ want, got uint64 }

func (e *entryMismatch) Error() string { return "read the wrong entry" }

// Storing a batch again that the log holds, identical, succeeds (boltdb
// stores it again); a different entry at a held index is refused.
func TestWALStoreLogsAgainIdenticalOnly(t *testing.T) {
	w, err := openWAL(filepath.Join(t.TempDir(), walDir), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.StoreLogs(entries(1, 10)); err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs(entries(6, 12)); err != nil {
		t.Fatalf("overlapping identical batch: %v", err)
	}
	if _, last, _ := span(w); last != 12 {
		t.Fatalf("log ends at %d, want 12", last)
	}
	other := entry(12)
	other.Term++
	if err := w.StoreLogs([]*raft.Log{other}); err == nil {
		t.Fatal("a different entry 12 was taken over the stored one")
	}
	var l raft.Log
	if err := w.GetLog(12, &l); err != nil || l.Term != entry(12).Term {
		t.Fatalf("entry 12 after the refused one: term %d, %v", l.Term, err)
	}
	if err := w.StoreLogs(entries(13, 13)); err != nil {
		t.Fatalf("append after a refused one: %v", err)
	}
}

// createFailsOnceVFS fails the first segment create after it is armed
// (ENOSPC, as a full disk answers the preallocation) and closes failed.
type createFailsOnceVFS struct {
	privateVFS
	armed  *atomic.Bool
	failed chan struct{}
}

func (v createFailsOnceVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	if v.armed.CompareAndSwap(true, false) {
		close(v.failed)
		return nil, &fs.PathError{Op: "fallocate", Path: filepath.Join(dir, name), Err: syscall.ENOSPC}
	}
	return v.privateVFS.Create(dir, name, size)
}

// A segment rotation that fails once (raft-wal runs it in the background
// after the append that filled the segment, and only logs its error) costs
// no failed write when the disk takes the next create: the append after it,
// refused as ErrSealed, is retried on the reopened WAL.
func TestWALStoreRotationFailedOnceCostsNoWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), walDir)
	v := createFailsOnceVFS{privateVFS{walfs.New()}, new(atomic.Bool), make(chan struct{})}
	w, err := openWALSized(dir, hclog.NewNullLogger(), v, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	v.armed.Store(true) // the next create is the first rotation's
	for i := uint64(1); i <= 20; i++ {
		if err := w.StoreLogs(bigEntries(i, i)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	select {
	case <-v.failed:
	default:
		t.Fatal("no segment create failed: 20 MiB did not rotate a 4 MiB segment")
	}
	w.Close()
	w, err = openWALSized(dir, hclog.NewNullLogger(), v, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if first, last, err := span(w); err != nil || first != 1 || last != 20 {
		t.Fatalf("reopened: span %d..%d (%v), want 1..20", first, last, err)
	}
}
