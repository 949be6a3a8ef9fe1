package logstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// walStore is a raft-wal log as the node's raft.LogStore, with what raft-wal
// v0.4.0 lacks for a store that must never strand its node:
//
//   - A failed write heals once the disk does. raft-wal keeps a failed
//     batch's entries counted in its segment writer (every retry is then
//     "non-monotonic append to segment"), and a segment rotation that fails
//     in its background goroutine is only logged, leaving the tail sealed
//     (every append is ErrSealed). So after any failed write the WAL is
//     closed and opened again from disk, and entries past the last one the
//     store acknowledged (a batch written but not synced) are dropped: the
//     log is what raft was told it is, and raft's retry goes through once
//     the disk works. Until then the old WAL serves reads up to that last
//     acknowledged entry, and each write tries the reopen again.
//   - Its Close also closes the WAL's meta database: wal.WAL.Close leaves
//     wal-meta.db open and flocked, and the next open in this process (a
//     node restarted in a test) would wait on that lock forever.
//   - GetLog answers ErrLogNotFound below the first index (see GetLog).
//   - Storing entries it already holds, identical, succeeds (see StoreLogs).
//
// Opening (openWALOn) refuses a segment directory without wal-meta.db and
// repairs a tail segment left sealed by a crash (see openWALFiles).
type walStore struct {
	path    string
	log     hclog.Logger
	vfs     types.VFS
	segSize int

	// writeMu serializes writes (StoreLogs, DeleteRange) and reopens, so the
	// last index read before a write is the last acknowledged one.
	writeMu sync.Mutex
	// mu guards the fields below. Reads and writes hold it shared while they
	// use the WAL; a reopen holds it exclusively, so no reader (GetLog from a
	// replication goroutine) uses a WAL being closed.
	mu   sync.RWMutex
	wal  *wal.WAL // nil after a failed reopen
	meta *metadb.BoltMetaDB
	// broken: a write failed, the WAL in memory cannot be trusted to take
	// another; it is read only up to acked, and the next write reopens it
	// from disk, keeping entries up to acked.
	broken bool
	acked  uint64
	closed bool
}

var (
	_ raft.LogStore          = (*walStore)(nil)
	_ raft.MonotonicLogStore = (*walStore)(nil)
)

// walSegmentSize is the size of each new WAL segment file, which raft-wal
// preallocates in full. Not raft-wal's default of 64 MiB: each time raft
// clears a log suffix (a follower dropping entries a new leader never
// committed, at leader changes under load) v0.4.0 seals the tail where it
// stands and preallocates a new segment, and the old ones stay until
// compaction passes them (thousands of entries later), so 20 clearings took
// 1.3 GiB of disk for a log of a few KiB (TestWALSuffixClearingsDiskBounded);
// a full disk is what fails a rotation. 4 MiB holds tens of thousands of
// lock commands; a rotation (a wal-meta.db commit and a new file) every 4 MiB
// costs nothing measurable per append: BenchmarkWALAppendBySegmentSize,
// 4,000 fsynced 16 KiB appends (15 rotations at 4 MiB), 2026-12-01 20:56 on
// this 2-core machine, load 2.7, fdatasync p50 0.27 ms: 311-333 us/op at
// 4 MiB, 301-344 us/op at 64 MiB. Segments already made keep their size.
const walSegmentSize = 4 << 20

func openWAL(path string, log hclog.Logger) (*walStore, error) {
	return openWALOn(path, log, privateVFS{walfs.New()})
}

// openWALOn opens the WAL in path with its segment files on vfs.
func openWALOn(path string, log hclog.Logger, vfs types.VFS) (*walStore, error) {
	return openWALSized(path, log, vfs, walSegmentSize)
}

// openWALSized opens the WAL with new segments of segSize bytes.
func openWALSized(path string, log hclog.Logger, vfs types.VFS, segSize int) (*walStore, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("wal dir %s: %w", path, err)
	}
	w, meta, err := openWALFiles(path, log, vfs, segSize)
	if err != nil {
		return nil, err
	}
	// The log holds every lease id: its files are private, as raft.db is.
	// raft-wal makes them 0644; segments made later go through privateVFS.
	if err := MakePrivate(path); err != nil {
		w.Close()
		meta.Close()
		return nil, fmt.Errorf("wal dir %s: %w", path, err)
	}
	return &walStore{path: path, log: log, vfs: vfs, segSize: segSize, wal: w, meta: meta}, nil
}

// openWALFiles opens raft-wal on path, first checking and repairing what
// raft-wal v0.4.0 would open into a log that cannot take an append or has
// lost its entries:
//
//   - Segment files without wal-meta.db (the WAL's table of contents: which
//     files make up the log, where each begins and ends). raft-wal would
//     start an empty log and delete every segment file as a leftover; the
//     node would start without the entries it acknowledged, and could vote
//     for a candidate that lacks them. A WAL never has segment files before
//     its meta database (raft-wal creates and commits it first), so this is
//     a lost file, and it is refused, as a lost raft.db is.
//   - A tail segment sealed on disk (its index block written and committed
//     with the batch that filled it) but not in wal-meta.db: raft-wal
//     records the rotation (tail sealed, next segment) in a separate commit
//     after that append returns, on a background goroutine; a kill between
//     the two leaves this (so does a Close right after that append: the
//     rotation then skips its work), and raft-wal's open recovers the tail
//     as a sealed writer it never rotates. The rotation is committed here, as raft-wal
//     would have: the tail sealed at its last entry with its index block,
//     and a next segment whose file raft-wal's open creates (it creates a
//     tail segment missing after its meta commit, the crash case it already
//     handles). A crash before this commit leaves the same state to repair
//     on the next start.
//
// A tail whose sealing batch was torn is handled in walFiler.RecoverTail.
func openWALFiles(path string, log hclog.Logger, vfs types.VFS, segSize int) (*wal.WAL, *metadb.BoltMetaDB, error) {
	if err := refuseLostWALMeta(path); err != nil {
		return nil, nil, err
	}
	meta := &metadb.BoltMetaDB{}
	filer := &walFiler{Filer: segment.NewFiler(path, vfs), dir: path, vfs: vfs}
	if err := rotateSealedTail(path, meta, filer, segSize, log); err != nil {
		meta.Close()
		return nil, nil, fmt.Errorf("open raft log (wal) in %s: %w", path, err)
	}
	filer.opened, filer.tracking = nil, true
	w, err := wal.Open(path, wal.WithLogger(log.Named("wal")), wal.WithMetaStore(meta),
		wal.WithSegmentFiler(filer), wal.WithSegmentSize(segSize))
	if err != nil {
		// wal.Open leaves open what it opened before it failed.
		filer.closeOpened()
		meta.Close()
		return nil, nil, fmt.Errorf("open raft log (wal) in %s: %w", path, err)
	}
	// Open: the WAL owns its segments now. No append (so no rotation, the
	// only other caller of the filer) has run yet.
	filer.opened, filer.tracking = nil, false
	return w, meta, nil
}

// refuseLostWALMeta refuses segment files without wal-meta.db.
func refuseLostWALMeta(path string) error {
	_, err := os.Stat(filepath.Join(path, metadb.FileName))
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("wal dir %s: %w", path, err)
	}
	segs, gerr := filepath.Glob(filepath.Join(path, "*.wal"))
	if gerr != nil {
		return fmt.Errorf("wal dir %s: %w", path, gerr)
	}
	if len(segs) > 0 {
		return fmt.Errorf("wal dir %s holds %d segment files but no %s, the list of which files make up the log and where each "+
			"begins: refusing to start with an empty log (raft-wal would delete the segments). Restore %s from the backup "+
			"the segments came from, or move the data dir aside and let the node rejoin empty",
			path, len(segs), metadb.FileName, metadb.FileName)
	}
	return nil
}

// rotateSealedTail commits the rotation of a tail segment that is sealed on
// disk but not in the meta database (see openWALFiles).
func rotateSealedTail(path string, meta *metadb.BoltMetaDB, filer *walFiler, segSize int, log hclog.Logger) error {
	ps, err := meta.Load(path)
	if err != nil {
		return err
	}
	n := len(ps.Segments)
	if n == 0 || !ps.Segments[n-1].SealTime.IsZero() {
		return nil
	}
	tail := ps.Segments[n-1]
	sw, err := filer.RecoverTail(tail)
	if errors.Is(err, os.ErrNotExist) {
		return nil // raft-wal's open creates it
	}
	if err != nil {
		return err
	}
	sealed, indexStart, err := sw.Sealed()
	last := sw.LastIndex()
	if cerr := sw.Close(); err == nil {
		err = cerr
	}
	if err != nil || !sealed {
		return err
	}
	now := time.Now()
	tail.SealTime = now
	tail.MaxIndex = last
	tail.IndexStart = indexStart
	ps.Segments[n-1] = tail
	ps.Segments = append(ps.Segments, types.SegmentInfo{
		ID:         ps.NextSegmentID,
		BaseIndex:  last + 1,
		MinIndex:   last + 1,
		SizeLimit:  uint32(segSize),
		Codec:      tail.Codec,
		CreateTime: now,
	})
	ps.NextSegmentID++
	if err := meta.CommitState(ps); err != nil {
		return fmt.Errorf("record the rotation of wal segment from index %d, sealed at %d: %w", tail.BaseIndex, last, err)
	}
	log.Warn("wal: the tail segment was sealed but its rotation not recorded (a crash or close right after it); recorded it",
		"segment_base", tail.BaseIndex, "last", last)
	return nil
}

// reader returns the WAL for a read and the last index it may be read to
// (the last acknowledged one after a failed write, which the old WAL still
// serves until the next write reopens it); release must be called when done
// with it. Only after a reopen failed, when there is no WAL, does a read try
// the reopen itself.
func (w *walStore) reader() (ww *wal.WAL, limit uint64, release func(), err error) {
	for {
		w.mu.RLock()
		if w.closed {
			w.mu.RUnlock()
			return nil, 0, nil, wal.ErrClosed
		}
		if w.wal != nil {
			limit = ^uint64(0)
			if w.broken {
				limit = w.acked
			}
			return w.wal, limit, w.mu.RUnlock, nil
		}
		w.mu.RUnlock()
		w.writeMu.Lock()
		w.mu.Lock()
		err := w.healLocked()
		w.mu.Unlock()
		w.writeMu.Unlock()
		if err != nil {
			return nil, 0, nil, err
		}
	}
}

// healLocked reopens a WAL a write failed on (see walStore). w.writeMu and
// w.mu are held.
func (w *walStore) healLocked() error {
	if w.closed {
		return wal.ErrClosed
	}
	if !w.broken {
		return nil
	}
	if w.wal != nil {
		w.wal.Close()
		w.meta.Close()
		w.wal, w.meta = nil, nil
	}
	ww, meta, err := openWALFiles(w.path, w.log, w.vfs, w.segSize)
	if err != nil {
		return fmt.Errorf("reopen the wal after a failed write: %w", err)
	}
	w.wal, w.meta = ww, meta
	last, err := ww.LastIndex()
	if err != nil {
		return fmt.Errorf("reopen the wal after a failed write: %w", err)
	}
	if last > w.acked {
		// The failed write reached the file but was not acknowledged (its
		// fsync failed): it goes, as boltdb rolls back a failed transaction.
		// If this fails, the WAL stays open, read up to acked, and the next
		// write reopens it again.
		if err := ww.DeleteRange(w.acked+1, last); err != nil {
			return fmt.Errorf("reopen the wal after a failed write: drop unacknowledged entries %d-%d: %w", w.acked+1, last, err)
		}
	}
	w.broken = false
	w.log.Info("wal reopened after a failed write", "last", w.acked, "dropped", last-min(last, w.acked))
	return nil
}

// write runs op on the WAL, reopened first if an earlier write failed. If op
// fails, the WAL is kept for reads up to the last index before op (what
// raft was told is stored) and reopened by the next write: raft-wal's
// writer cannot be trusted to take another append (see walStore).
//
// ErrSealed is retried once, after the reopen: raft-wal's background
// rotation after the append that filled the segment failed (it only logs
// that), and the op wrote nothing; reopened, the WAL completes the rotation
// if the disk takes it now, and a leader need not step down for a write
// the disk would have taken.
func (w *walStore) write(op func(*wal.WAL) error) error {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	err := w.writeOnce(op)
	if errors.Is(err, wal.ErrSealed) {
		err = w.writeOnce(op)
	}
	return err
}

// writeOnce is write without the retry; w.writeMu is held.
func (w *walStore) writeOnce(op func(*wal.WAL) error) error {
	w.mu.RLock()
	if w.broken {
		w.mu.RUnlock()
		w.mu.Lock()
		err := w.healLocked()
		w.mu.Unlock()
		if err != nil {
			return err
		}
		w.mu.RLock() // only writes, under writeMu, break it again
	}
	if w.closed {
		w.mu.RUnlock()
		return wal.ErrClosed
	}
	ww := w.wal
	acked, err := ww.LastIndex()
	if err == nil {
		err = op(ww)
	}
	w.mu.RUnlock()
	if err == nil || errors.Is(err, wal.ErrClosed) {
		return err
	}
	w.mu.Lock()
	if !w.closed && w.wal == ww {
		w.broken, w.acked = true, acked
	}
	w.mu.Unlock()
	return err
}

func (w *walStore) FirstIndex() (uint64, error) {
	ww, limit, release, err := w.reader()
	if err != nil {
		return 0, err
	}
	defer release()
	first, err := ww.FirstIndex()
	if first > limit {
		return 0, err // the log was empty before the failed write
	}
	return first, err
}

func (w *walStore) LastIndex() (uint64, error) {
	ww, limit, release, err := w.reader()
	if err != nil {
		return 0, err
	}
	defer release()
	last, err := ww.LastIndex()
	return min(last, limit), err
}

// GetLog answers ErrLogNotFound below the first index. raft-wal (v0.4.0)
// drops a head of the log only logically and still serves those entries
// from its tail segment; the leader would then replicate compacted entries
// instead of sending its snapshot, as it does with boltdb.
func (w *walStore) GetLog(index uint64, l *raft.Log) error {
	ww, limit, release, err := w.reader()
	if err != nil {
		return err
	}
	defer release()
	first, err := ww.FirstIndex()
	if err != nil {
		return err
	}
	if index < first || index > limit {
		return raft.ErrLogNotFound
	}
	return ww.GetLog(index, l)
}

func (w *walStore) StoreLog(l *raft.Log) error { return w.StoreLogs([]*raft.Log{l}) }

// StoreLogs appends logs. Entries it already holds, identical (a retry of a
// batch whose failure was reported after it was stored), are skipped, as
// boltdb stores them again; a different entry at such an index is refused
// (raft deletes a conflicting suffix before it appends).
func (w *walStore) StoreLogs(logs []*raft.Log) error {
	return w.write(func(ww *wal.WAL) error {
		last, err := ww.LastIndex()
		if err != nil {
			return err
		}
		for len(logs) > 0 && last > 0 && logs[0].Index <= last {
			var have raft.Log
			if err := ww.GetLog(logs[0].Index, &have); err != nil {
				return fmt.Errorf("append entry %d, the log ends at %d: %w", logs[0].Index, last, err)
			}
			if !sameEntry(&have, logs[0]) {
				return fmt.Errorf("append entry %d: the log holds a different entry %d (term %d, this one term %d)",
					logs[0].Index, logs[0].Index, have.Term, logs[0].Term)
			}
			logs = logs[1:]
		}
		return ww.StoreLogs(logs)
	})
}

func sameEntry(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Extensions, b.Extensions)
}

func (w *walStore) DeleteRange(min, max uint64) error {
	return w.write(func(ww *wal.WAL) error { return ww.DeleteRange(min, max) })
}

// IsMonotonic: raft-wal takes only contiguous appends (raft.MonotonicLogStore).
func (w *walStore) IsMonotonic() bool { return true }

func (w *walStore) Close() error {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if w.wal == nil {
		return nil
	}
	err := w.wal.Close()
	if merr := w.meta.Close(); err == nil && merr != nil {
		err = fmt.Errorf("close wal meta: %w", merr)
	}
	return err
}

// walFiler is raft-wal's segment filer with two repairs: sealed segments
// without an index block (indexlessSealFiler), and a tail whose sealing
// batch was torn (RecoverTail). While tracking, it remembers what it opened,
// for openWALFiles to close when raft-wal's open fails half way.
type walFiler struct {
	*segment.Filer
	dir      string
	vfs      types.VFS
	tracking bool
	opened   []io.Closer
}

func (f *walFiler) track(c io.Closer) {
	if f.tracking {
		f.opened = append(f.opened, c)
	}
}

func (f *walFiler) Open(info types.SegmentInfo) (types.SegmentReader, error) {
	r, err := indexlessSealFiler{f.Filer}.Open(info)
	if err == nil {
		f.track(r)
	}
	return r, err
}

func (f *walFiler) Create(info types.SegmentInfo) (types.SegmentWriter, error) {
	sw, err := f.Filer.Create(info)
	if err == nil {
		f.track(sw)
	}
	return sw, err
}

func (f *walFiler) closeOpened() {
	for _, c := range f.opened {
		c.Close()
	}
	f.opened = nil
}

// RecoverTail recovers the tail segment as raft-wal does, except that a tail
// whose sealing batch was torn is not left sealed. The append that fills a
// segment writes its entries, the index block and the commit frame in one
// write and one fsync; a crash that loses part of it leaves a batch raft was
// never told is stored. raft-wal's recovery rewinds past that batch to the
// last whole commit, as for any torn tail, but the scan saw the index frame
// and leaves the writer sealed, though it was never committed: every append
// would be ErrSealed, at every start. Here the torn bytes (from the end of
// the last whole commit through the uncommitted index frame) are zeroed and
// synced before the tail is recovered again. They lie past the last commit,
// so they hold nothing acknowledged, and the next append overwrites them
// anyway; a crash part way leaves the same repair to do on the next start.
// A tail whose index block was committed with its last batch is truly
// sealed: openWALFiles records its rotation.
func (f *walFiler) RecoverTail(info types.SegmentInfo) (types.SegmentWriter, error) {
	sw, err := f.recoverTail(info)
	if err == nil {
		f.track(sw)
	}
	return sw, err
}

func (f *walFiler) recoverTail(info types.SegmentInfo) (types.SegmentWriter, error) {
	sw, err := f.Filer.RecoverTail(info)
	if err != nil {
		return nil, err
	}
	sealed, indexStart, err := sw.Sealed()
	if err != nil || !sealed {
		return sw, err
	}
	from, err := committedEnd(sw, info, indexStart)
	if err != nil || from == 0 {
		// from 0: the index block was committed with the last batch.
		if err != nil {
			sw.Close()
		}
		return sw, err
	}
	sw.Close()
	if err := f.zeroTornSeal(info, from, indexStart); err != nil {
		return nil, fmt.Errorf("wal segment from index %d: clear a torn sealing batch: %w", info.BaseIndex, err)
	}
	sw, err = f.Filer.RecoverTail(info)
	if err != nil {
		return nil, err
	}
	if sealed, _, _ := sw.Sealed(); sealed {
		sw.Close()
		return nil, fmt.Errorf("%w: wal segment from index %d still sealed after clearing a torn sealing batch from offset %d",
			types.ErrCorrupt, info.BaseIndex, from)
	}
	return sw, nil
}

// Segment format (raft-wal segment/format.go): a 32-byte file header, then
// 8-byte-aligned frames, each an 8-byte header (type, 3 zero bytes, a
// little-endian length, or CRC for a commit frame) and its padded payload.
const (
	walFileHeaderLen  = 32
	walFrameHeaderLen = 8
	walFrameCommit    = 3
)

func walFrameSize(payload int) int64 {
	return int64(walFrameHeaderLen + (payload+walFrameHeaderLen-1)/walFrameHeaderLen*walFrameHeaderLen)
}

// committedEnd is the file offset just past the last commit the recovered
// writer sw kept, or 0 when its index block (its frame header just before
// indexStart) was committed with that batch.
func committedEnd(sw types.SegmentWriter, info types.SegmentInfo, indexStart uint64) (int64, error) {
	last := sw.LastIndex()
	if last < info.BaseIndex {
		// No whole commit: the frames start after the file header.
		return walFileHeaderLen, nil
	}
	of, ok := sw.(interface{ OffsetForFrame(uint64) (uint32, error) })
	if !ok {
		return 0, fmt.Errorf("wal segment writer %T does not give frame offsets", sw)
	}
	off, err := of.OffsetForFrame(last)
	if err != nil {
		return 0, fmt.Errorf("wal segment from index %d: offset of entry %d: %w", info.BaseIndex, last, err)
	}
	buf, err := sw.GetLog(last)
	if err != nil {
		return 0, fmt.Errorf("wal segment from index %d: read entry %d: %w", info.BaseIndex, last, err)
	}
	entryEnd := int64(off) + walFrameSize(len(buf.Bs))
	buf.Close()
	if uint64(entryEnd)+walFrameHeaderLen == indexStart {
		return 0, nil
	}
	return entryEnd + walFrameHeaderLen, nil // past the batch's commit frame
}

// zeroTornSeal zeroes the segment from offset from through the index frame
// whose array starts at indexStart and the commit frame after it, and syncs.
func (f *walFiler) zeroTornSeal(info types.SegmentInfo, from int64, indexStart uint64) error {
	wf, err := f.vfs.OpenWriter(f.dir, segment.FileName(info))
	if err != nil {
		return err
	}
	defer wf.Close()
	if uint64(from) >= indexStart {
		return fmt.Errorf("%w: torn batch at %d is past the index frame at %d", types.ErrCorrupt, from, indexStart)
	}
	if from > walFileHeaderLen {
		var c [walFrameHeaderLen]byte
		if _, err := wf.ReadAt(c[:], from-walFrameHeaderLen); err != nil {
			return err
		}
		if c[0] != walFrameCommit {
			return fmt.Errorf("%w: no commit frame before offset %d", types.ErrCorrupt, from)
		}
	}
	// The index frame's header is just before indexStart; its end plus the
	// commit frame after it is indexStart + its frame size. A length past
	// the segment's size is itself torn: the header alone goes then.
	var h [walFrameHeaderLen]byte
	if _, err := wf.ReadAt(h[:], int64(indexStart)-walFrameHeaderLen); err != nil {
		return err
	}
	to := int64(indexStart)
	if n := binary.LittleEndian.Uint32(h[4:8]); n <= info.SizeLimit {
		to += walFrameSize(int(n))
	}
	if _, err := wf.WriteAt(make([]byte, to-from), from); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return wf.Sync()
}
