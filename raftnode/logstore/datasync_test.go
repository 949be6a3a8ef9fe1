package logstore

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	walfs "github.com/hashicorp/raft-wal/fs"
)

// TestPrivateVFSSegmentsSyncWithFdatasync: on Linux a segment privateVFS
// creates or reopens syncs through dataSyncFile (fdatasync, the directory
// once), and what was written and synced reads back.
func TestPrivateVFSSegmentsSyncWithFdatasync(t *testing.T) {
	dir := t.TempDir()
	v := privateVFS{walfs.New()}
	f, err := v.Create(dir, "seg", 4096)
	if err != nil {
		t.Fatal(err)
	}
	ds, ok := f.(*dataSyncFile)
	if ok != (runtime.GOOS == "linux") {
		t.Fatalf("created segment is %T on %s", f, runtime.GOOS)
	}
	if _, err := f.WriteAt([]byte("entry"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if ok && !ds.dirSynced.Load() {
		t.Error("the first Sync did not sync the directory")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "seg")); err != nil || fi.Size() != 4096 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("segment stat %v, %v: want 4096 bytes, 0600 (preallocated: appends never change the size)", fi, err)
	}
	w, err := v.OpenWriter(dir, "seg")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, ok := w.(*dataSyncFile); ok != (runtime.GOOS == "linux") {
		t.Fatalf("reopened segment is %T", w)
	}
	if _, err := w.WriteAt([]byte("more"), 5); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "seg"))
	if err != nil || !bytes.HasPrefix(got, []byte("entrymore")) {
		t.Fatalf("read back %q, %v", got[:9], err)
	}
}
