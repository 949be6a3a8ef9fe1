package logstore

import (
	"os"
	"sync/atomic"

	"github.com/hashicorp/raft-wal/types"
)

// dataSyncFile is a WAL segment whose Sync flushes its data with
// fdatasync(2) where the system has it, instead of fsync(2). A segment is
// preallocated to its full size when created, so an append never changes
// the file's size: fsync would also write the inode's new mtime, a journal
// commit per Raft append that fdatasync skips, while the data and whatever
// metadata reading it back needs (the allocation of the blocks written) are
// flushed all the same. The first Sync also syncs the directory, as
// raft-wal's own file does, so that a new segment's name survives a crash.
type dataSyncFile struct {
	types.WritableFile
	fd        uintptr
	dir       string
	dirSynced atomic.Bool
}

// withDataSync wraps a segment file raft-wal's VFS opened or created in
// dir. Its first Sync syncs dir too, also for a segment reopened after a
// restart: the crash before it may have come before its directory entry was
// synced.
func withDataSync(f types.WritableFile, dir string) types.WritableFile {
	fd, ok := f.(interface{ Fd() uintptr })
	if !ok || !haveDataSync {
		return f
	}
	return &dataSyncFile{WritableFile: f, fd: fd.Fd(), dir: dir}
}

func (f *dataSyncFile) Sync() error {
	if err := fdatasync(f.fd); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.dir, Err: err}
	}
	if f.dirSynced.Load() {
		return nil
	}
	d, err := os.Open(f.dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		f.dirSynced.Store(true)
	}
	return err
}
