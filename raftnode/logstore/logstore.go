// Package logstore holds a raftlock node's Raft log and stable store: the
// log in raft-wal (DATA/wal) or in raft-boltdb (raft.db, which is the
// stable store, term and vote, either way), moving the log between the two
// when the kind changes, the repairs raft-wal v0.4.0 needs to never strand
// a node, the checks that refuse a damaged or incomplete data dir before
// raft opens it, and the wrappers raft sees the stores through (writes that
// fail as ErrStorage, a stable store safe to close, private snapshot files).
//
// It is apart from raftnode, which wires these stores to hashicorp/raft,
// as hashicorp/raft keeps its log stores out of the consensus package
// (raft-boltdb and raft-wal are modules of their own): nothing here knows
// the node, the lock state machine or the cluster, so the storage code and
// its crash and fault tests can be read and changed on their own.
package logstore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// Log store kinds. raft.db (raft-boltdb) is the stable store (term, vote) in
// both; only where the Raft log lives differs.
const (
	// WAL keeps the log in DATA/wal/ (hashicorp/raft-wal): one fdatasync
	// per append, where BoltDB needs two (data pages, then meta).
	WAL = "wal"
	// BoltDB keeps the log in raft.db beside the stable store.
	BoltDB = "boltdb"
)

// Default is the log store of a node whose configuration names none.
// The WAL: it commits an append with one fdatasync where BoltDB needs two
// (data pages, then meta), and hashicorp/raft syncs the leader's append and
// each follower's in series, so a commit waits on two syncs instead of four.
// Measured side by side on this 2-core machine (scripts/bench-compare.sh,
// 2026-12-01 19:22, quiet, fdatasync p50 0.25 ms): 218/1,162/2,060
// acquire+release cycles/s at 1/16/64 workers, boltdb 143/618/1,416.
// raft-wal v0.4.0 (the only release the module proxy serves) strands a node
// whose tail segment was sealed without an index after raft cleared a log
// suffix (hashicorp/raft-wal#31); indexlessSealFiler reopens such a segment,
// tested by TestWALSuffixClearedSurvivesRestarts. A data dir whose log is in
// raft.db (boltdb, the default before) is moved into the WAL on start;
// --log-store boltdb keeps or moves it back there.
const Default = WAL

// The WAL's directories in the data dir. A migration builds the WAL in
// walStaging and renames it to walDir (the commit point: from then on the
// WAL is the log); going back, walDir is renamed to walDropped (the commit
// point the other way) before it is deleted. A rename is atomic, so a crash
// at any step leaves one complete log.
const (
	walDir     = "wal"
	walStaging = "wal.migrating"
	walDropped = "wal.dropped"
)

// migrateBatch is how many entries one store call of a migration copies.
const migrateBatch = 1024

// ValidKind reports whether kind names a log store (WAL or BoltDB).
func ValidKind(kind string) bool { return kind == WAL || kind == BoltDB }

// Open opens the Raft log store of kind (WAL or BoltDB) in the data dir.
// bolt is the node's open raft.db: the stable store in both kinds, and the
// log store of "boltdb". A log found in the other store is moved into the
// chosen one first (see migrateToWAL, migrateToBolt), so switching
// --log-store needs no other step. The closer closes what this opened
// (nothing for "boltdb": the caller closes raft.db).
func Open(dir, kind string, bolt *raftboltdb.BoltStore, log hclog.Logger) (raft.LogStore, io.Closer, error) {
	// Leftovers of a migration cut off before its commit point: the log is
	// still whole in its old place.
	for _, d := range []string{walStaging, walDropped} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			return nil, nil, fmt.Errorf("remove leftover %s: %w", filepath.Join(dir, d), err)
		}
	}
	if err := checkWALMeta(dir); err != nil {
		return nil, nil, err
	}
	switch kind {
	case WAL:
		w, err := migrateToWAL(dir, bolt, log)
		if err != nil {
			return nil, nil, err
		}
		return w, w, nil
	case BoltDB:
		if err := migrateToBolt(dir, bolt, log); err != nil {
			return nil, nil, err
		}
		return bolt, nopCloser{}, nil
	default:
		return nil, nil, fmt.Errorf("unknown log store %q (want %q or %q)", kind, WAL, BoltDB)
	}
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// HasWAL reports whether the data dir holds a WAL (DATA/wal with its
// wal-meta.db), that is whether its Raft log is in the WAL rather than in
// raft.db.
func HasWAL(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, walDir, "wal-meta.db"))
	if errors.Is(err, fs.ErrNotExist) {
		// Segment files without their meta database are a lost wal-meta.db,
		// not "no WAL": refused, whichever store the node is to use.
		return false, refuseLostWALMeta(filepath.Join(dir, walDir))
	}
	return err == nil, err
}

// indexlessSealFiler works around hashicorp/raft-wal#31 (fixed upstream by
// PR #33, after v0.4.0, the only release the module proxy serves). When raft
// clears a log suffix inside the open tail segment (a follower dropping
// entries a new leader never committed), v0.4.0 marks that segment sealed in
// its meta database with the new MaxIndex but never writes the segment's
// index block; every later start then failed to read it ("sealed segment
// has no index block") and the node could not start. The file itself is
// whole: each batch was fsynced with its commit frame before raft was told
// it was stored. So such a segment is opened the way an unsealed tail is
// recovered, by scanning its frames for their offsets. Entries past MaxIndex
// (the cleared suffix, still in the file) are never read: the WAL looks an
// index up in the segment whose meta range holds it.
type indexlessSealFiler struct{ *segment.Filer }

func (f indexlessSealFiler) Open(info types.SegmentInfo) (types.SegmentReader, error) {
	if info.SealTime.IsZero() || info.IndexStart != 0 {
		return f.Filer.Open(info)
	}
	w, err := f.Filer.RecoverTail(info)
	if err != nil {
		return nil, fmt.Errorf("wal segment from index %d, sealed without an index block (hashicorp/raft-wal#31): %w", info.BaseIndex, err)
	}
	if last := w.LastIndex(); last < info.MaxIndex {
		w.Close()
		return nil, fmt.Errorf("%w: wal segment from index %d, sealed without an index block, holds entries up to %d; its metadata says %d",
			types.ErrCorrupt, info.BaseIndex, last, info.MaxIndex)
	}
	return readOnlySegment{w}, nil
}

// readOnlySegment hides the recovering writer's Append: a sealed segment is
// only ever read.
type readOnlySegment struct{ w types.SegmentWriter }

func (r readOnlySegment) GetLog(idx uint64) (*types.PooledBuffer, error) { return r.w.GetLog(idx) }
func (r readOnlySegment) Close() error                                   { return r.w.Close() }

// privateVFS makes each new segment file 0600, and syncs segments with
// fdatasync (dataSyncFile).
type privateVFS struct{ *walfs.FS }

func (v privateVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.FS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Join(dir, name), 0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal segment %s: %w", name, err)
	}
	return withDataSync(f, dir), nil
}

func (v privateVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.FS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return withDataSync(f, dir), nil
}

// migrateToWAL opens DATA/wal, first moving into it a log that raft.db holds.
func migrateToWAL(dir string, bolt *raftboltdb.BoltStore, log hclog.Logger) (*walStore, error) {
	boltFirst, boltLast, err := span(bolt)
	if err != nil {
		return nil, fmt.Errorf("inspect raft log in raft.db: %w", err)
	}
	exists, err := HasWAL(dir)
	if err != nil {
		return nil, err
	}
	if !exists && boltLast > 0 {
		stage := filepath.Join(dir, walStaging)
		w, err := openWAL(stage, log)
		if err != nil {
			return nil, err
		}
		n, err := copyLog(bolt, w, boltFirst, boltLast)
		if cerr := w.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close wal: %w", cerr)
		}
		if err != nil {
			return nil, fmt.Errorf("move raft log from raft.db to %s: %w (raft.db is unchanged; start with --log-store boltdb to keep it there)", stage, err)
		}
		if err := renameDurable(dir, walStaging, walDir); err != nil {
			return nil, err
		}
		log.Info("moved raft log from raft.db to the wal", "dir", dir, "entries", n, "first", boltLast-uint64(n)+1, "last", boltLast)
	}
	w, err := openWAL(filepath.Join(dir, walDir), log)
	if err != nil {
		return nil, err
	}
	if boltLast > 0 {
		// The WAL is the log now (a migration committed, maybe in an earlier
		// run cut off before this step): raft.db's copy goes.
		if _, walLast, err := span(w); err != nil || walLast < boltLast {
			w.Close()
			return nil, fmt.Errorf("data dir %s: raft.db holds log entries to %d but the wal only to %d (%v): "+
				"refusing to guess which is right; move the data dir aside and let the node rejoin empty", dir, boltLast, walLast, err)
		}
		if err := bolt.DeleteRange(boltFirst, boltLast); err != nil {
			w.Close()
			return nil, fmt.Errorf("drop moved raft log from raft.db: %w", err)
		}
	}
	return w, nil
}

// migrateToBolt moves a log that DATA/wal holds into raft.db and drops the WAL.
func migrateToBolt(dir string, bolt *raftboltdb.BoltStore, log hclog.Logger) error {
	exists, err := HasWAL(dir)
	if err != nil || !exists {
		return err
	}
	w, err := openWAL(filepath.Join(dir, walDir), log)
	if err != nil {
		return err
	}
	n, last, err := func() (int, uint64, error) {
		defer w.Close()
		// Entries in raft.db beside a WAL are a copy cut short (the WAL is the
		// log until it is dropped): start again.
		if first, last, err := span(bolt); err != nil {
			return 0, 0, err
		} else if last > 0 {
			if err := bolt.DeleteRange(first, last); err != nil {
				return 0, 0, err
			}
		}
		first, last, err := span(w)
		if err != nil || last == 0 {
			return 0, 0, err
		}
		n, err := copyLog(w, bolt, first, last)
		return n, last, err
	}()
	if err != nil {
		return fmt.Errorf("move raft log from %s to raft.db: %w (the wal is unchanged; start with --log-store wal to keep it there)",
			filepath.Join(dir, walDir), err)
	}
	if err := renameDurable(dir, walDir, walDropped); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(dir, walDropped)); err != nil {
		log.Warn("cannot delete the old wal; it is no longer used", "dir", filepath.Join(dir, walDropped), "error", err)
	}
	log.Info("moved raft log from the wal to raft.db", "dir", dir, "entries", n, "last", last)
	return nil
}

// span is a log store's first and last index (0, 0 when empty).
func span(s raft.LogStore) (first, last uint64, err error) {
	if first, err = s.FirstIndex(); err != nil {
		return 0, 0, err
	}
	if last, err = s.LastIndex(); err != nil {
		return 0, 0, err
	}
	return first, last, nil
}

// copyLog copies the contiguous run of entries that ends at last from src to
// dst and returns how many it copied. raft-boltdb may hold a gap: a follower
// that installed a snapshot keeps its older entries, all below that
// snapshot; those are not copied (raft-wal takes only contiguous appends).
func copyLog(src, dst raft.LogStore, first, last uint64) (int, error) {
	start := last
	for start > first {
		var l raft.Log
		err := src.GetLog(start-1, &l)
		if errors.Is(err, raft.ErrLogNotFound) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("read entry %d: %w", start-1, err)
		}
		start--
	}
	for i := start; i <= last; {
		batch := make([]*raft.Log, 0, min(migrateBatch, last-i+1))
		for ; i <= last && len(batch) < migrateBatch; i++ {
			l := new(raft.Log)
			if err := src.GetLog(i, l); err != nil {
				return 0, fmt.Errorf("read entry %d: %w", i, err)
			}
			batch = append(batch, l)
		}
		if err := dst.StoreLogs(batch); err != nil {
			return 0, fmt.Errorf("write entries %d-%d: %w", batch[0].Index, batch[len(batch)-1].Index, err)
		}
	}
	return int(last - start + 1), nil
}

// renameDurable renames dir/from to dir/to and fsyncs dir, so the rename
// survives a power cut.
func renameDurable(dir, from, to string) error {
	if err := os.Rename(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil {
		return fmt.Errorf("rename %s to %s: %w", from, to, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync data dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync data dir %s: %w", dir, err)
	}
	return nil
}

// KeepMonotonic gives wrapped (a wrapper of inner, such as the error guard
// or a test hook) inner's demand for contiguous appends: raft-wal refuses a
// gap, and raft clears the log after installing a snapshot only when the
// store it holds says IsMonotonic. A wrapper that embeds raft.LogStore hides
// the method; raft's LogCache passes it on from the store it wraps.
func KeepMonotonic(inner, wrapped raft.LogStore) raft.LogStore {
	if m, ok := inner.(raft.MonotonicLogStore); ok && m.IsMonotonic() {
		if _, ok := wrapped.(raft.MonotonicLogStore); !ok {
			return monotonicLogs{wrapped}
		}
	}
	return wrapped
}

type monotonicLogs struct{ raft.LogStore }

func (monotonicLogs) IsMonotonic() bool { return true }
