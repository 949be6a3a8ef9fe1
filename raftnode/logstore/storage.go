package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// storageError carries a store's error to raft's futures: it says
// ErrStorage to whoever prints it and keeps the cause for errors.Is/As.
type storageError struct{ cause error }

func (e *storageError) Error() string        { return nodeapi.ErrStorage.Error() }
func (e *storageError) Is(target error) bool { return target == nodeapi.ErrStorage }
func (e *storageError) Unwrap() error        { return e.cause }

// GuardWrites wraps a log store so that a failed write is logged in full
// here and reaches raft (and Apply's caller) as an error that is
// nodeapi.ErrStorage, without the data dir's path; the cause stays reachable
// through errors.Is/As. The wrapper hides a MonotonicLogStore's IsMonotonic:
// see KeepMonotonic.
func GuardWrites(logs raft.LogStore, log hclog.Logger) raft.LogStore {
	return guardedLogs{LogStore: logs, log: log}
}

type guardedLogs struct {
	raft.LogStore
	log hclog.Logger
}

func (g guardedLogs) StoreLog(l *raft.Log) error {
	return g.check("store log", g.LogStore.StoreLog(l))
}

func (g guardedLogs) StoreLogs(ls []*raft.Log) error {
	return g.check("store logs", g.LogStore.StoreLogs(ls))
}

func (g guardedLogs) DeleteRange(min, max uint64) error {
	return g.check("delete log range", g.LogStore.DeleteRange(min, max))
}

func (g guardedLogs) check(op string, err error) error {
	if err == nil {
		return nil
	}
	g.log.Error("raft log store write failed", "op", op, "error", err)
	return &storageError{cause: err}
}

// Bolt's file layout, enough to check a raft.db before bolt maps it: two
// meta pages, each a 16-byte page header then the meta fields.
const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	boltPageHeader  = 16
	boltMetaSumSize = 56 // the meta fields before the checksum
)

// CheckBoltFile refuses a raft.db that bolt would crash on: bolt mmaps the
// file and reads the pages its meta page names, so a file truncated below
// that size dies of SIGBUS instead of returning an error. A missing or empty
// file is fine (bolt makes a new one).
func CheckBoltFile(path string) error {
	return checkBolt(path, func(why string, size int64) error {
		return fmt.Errorf("%s is damaged (%s; %d bytes): this node's Raft log and vote record cannot be read. "+
			"Restore it from a backup, or move the data dir aside and let the node rejoin the cluster empty", path, why, size)
	})
}

// checkWALMeta refuses a DATA/wal/wal-meta.db that bolt would crash on, as
// CheckBoltFile does raft.db: raft-wal keeps in it which segment files make
// up the log, in a bolt file of its own, and a truncated one ended the
// process in SIGBUS. It runs before either log store kind opens the WAL
// (--log-store boltdb opens it too, to move the log out).
func checkWALMeta(dataDir string) error {
	path := filepath.Join(dataDir, walDir, "wal-meta.db")
	return checkBolt(path, func(why string, size int64) error {
		return fmt.Errorf("%s is damaged (%s; %d bytes): it records which files in %s hold this node's Raft log, "+
			"so the log cannot be read (neither --log-store can open it). "+
			"Restore the data dir from a backup, or move the data dir aside and let the node rejoin the cluster empty",
			path, why, size, filepath.Dir(path))
	})
}

// checkBolt checks the bolt file at path (see CheckBoltFile); damaged makes
// the error that says what is wrong with it.
func checkBolt(path string, damaged func(why string, size int64) error) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if size == 0 {
		return nil
	}
	var best struct{ txid, pages, pageSize uint64 }
	found := false
	// Meta page 0 sits at offset 0; meta page 1 one page further, where the
	// page size is the one meta 0 states (or the OS page size if meta 0 is
	// unreadable), as bolt itself finds it.
	offsets := []int64{0}
	for i := 0; i < len(offsets) && i < 2; i++ {
		buf := make([]byte, boltPageHeader+boltMetaSumSize+8)
		if _, err := f.ReadAt(buf, offsets[i]); err != nil {
			if i == 0 {
				offsets = append(offsets, int64(os.Getpagesize()))
			}
			continue
		}
		m := buf[boltPageHeader:]
		le := binary.LittleEndian
		pageSize := uint64(le.Uint32(m[8:]))
		if i == 0 {
			next := int64(pageSize)
			if le.Uint32(m[0:]) != boltMagic || pageSize == 0 {
				next = int64(os.Getpagesize())
			}
			offsets = append(offsets, next)
		}
		h := fnv.New64a()
		h.Write(m[:boltMetaSumSize])
		if le.Uint32(m[0:]) != boltMagic || le.Uint32(m[4:]) != boltVersion || le.Uint64(m[boltMetaSumSize:]) != h.Sum64() {
			continue
		}
		txid := le.Uint64(m[48:])
		if !found || txid > best.txid {
			best.txid, best.pages, best.pageSize, found = txid, le.Uint64(m[40:]), pageSize, true
		}
	}
	if !found {
		return damaged("no valid bolt meta page", size)
	}
	if want := best.pages * best.pageSize; uint64(size) < want {
		return damaged(fmt.Sprintf("truncated: its meta page needs %d bytes", want), size)
	}
	return nil
}

// CheckVoteRecord refuses a data dir that holds Raft state (log entries or a
// snapshot) but no current term: raft.db was lost or replaced while the
// snapshots survived. Started anyway, the node forgets whom it voted for and
// can vote again in a term it already voted in, electing a second leader.
// allow (--allow-lost-vote-record) starts it anyway, with a warning.
func CheckVoteRecord(stable raft.StableStore, logs raft.LogStore, snaps raft.SnapshotStore, dir string, allow bool, log hclog.Logger) error {
	if term, err := stable.GetUint64([]byte("CurrentTerm")); err == nil && term > 0 {
		return nil
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("inspect raft log: %w", err)
	}
	list, err := snaps.List()
	if err != nil {
		return fmt.Errorf("inspect snapshots: %w", err)
	}
	if last == 0 && len(list) == 0 {
		return nil // a fresh data dir
	}
	if allow {
		log.Warn("starting without a vote record, as --allow-lost-vote-record asks: this node may vote twice in a term it already voted in",
			"dir", dir, "last_index", last, "snapshots", len(list))
		return nil
	}
	return fmt.Errorf("data dir %s holds Raft state (last log index %d, %d snapshots) but no vote record (current term) in raft.db: "+
		"raft.db was lost or replaced. Started like this, the node could vote twice in one term and the cluster could elect two leaders. "+
		"Safest: move the data dir aside and let the node rejoin empty. If you are sure no election can be affected "+
		"(e.g. every other member is stopped), start once with --allow-lost-vote-record", dir, last, len(list))
}

// NewPrivateSnapshots wraps the snapshot store whose snapshots are in dir so
// that its files stay private: hashicorp/raft makes its directories 0755 and
// files 0644 (less the umask), and they hold every lease id. After each
// snapshot the tree is closed again to 0700/0600.
func NewPrivateSnapshots(snaps raft.SnapshotStore, dir string, log hclog.Logger) raft.SnapshotStore {
	return privateSnapshots{SnapshotStore: snaps, dir: dir, log: log}
}

type privateSnapshots struct {
	raft.SnapshotStore
	dir string
	log hclog.Logger
}

func (p privateSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := p.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return privateSink{SnapshotSink: sink, p: p}, nil
}

type privateSink struct {
	raft.SnapshotSink
	p privateSnapshots
}

func (s privateSink) Close() error {
	err := s.SnapshotSink.Close()
	if perr := MakePrivate(s.p.dir); perr != nil {
		s.p.log.Error("cannot make snapshots private", "dir", s.p.dir, "error", perr)
	}
	return err
}

// MakePrivate sets dir and everything under it to 0700 (directories) and
// 0600 (files), whatever the umask or a pre-made directory gave them.
func MakePrivate(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a temporary snapshot dir renamed or reaped meanwhile
			}
			return err
		}
		mode := os.FileMode(0o600)
		if d.IsDir() {
			mode = 0o700
		}
		if err := os.Chmod(path, mode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
}

// ClosingStable is the stable store (term, vote) as raft sees it, made safe
// to close (NewClosingStable). hashicorp/raft answers heartbeats on the transport's connection
// goroutines, which Raft.Shutdown does not wait for, and it panics when it
// cannot save a newer term. So Close waits for writes in flight, and a write
// that comes after it waits for the process to end: its term is not saved,
// and no answer that would promise it goes out.
type ClosingStable struct {
	raft.StableStore
	mu     sync.RWMutex
	closed bool
	// late is what a write after close waits for: nil, that is forever,
	// but in tests, which end the wait to see it was held.
	late chan struct{}
}

// NewClosingStable wraps stable; Close it before closing stable itself.
func NewClosingStable(stable raft.StableStore) *ClosingStable {
	return &ClosingStable{StableStore: stable}
}

func (s *ClosingStable) Set(key, val []byte) error {
	return s.write(func() error { return s.StableStore.Set(key, val) })
}

func (s *ClosingStable) SetUint64(key []byte, val uint64) error {
	return s.write(func() error { return s.StableStore.SetUint64(key, val) })
}

func (s *ClosingStable) write(set func() error) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		<-s.late // see the type's comment
		return errors.New("raft stable store closed")
	}
	defer s.mu.RUnlock()
	return set()
}

// Close lets no write start from now on and waits for those in flight. It
// does not close the wrapped store.
func (s *ClosingStable) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}
