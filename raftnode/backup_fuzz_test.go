package raftnode_test

import (
	"bytes"
	"testing"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/raftnode"
)

// FuzzRestoreBackup runs any bytes through the restore decoder and, for
// what it accepts, the install path without raft: the state prepared at the
// index raft would install it at, written as the snapshot every replica
// installs, read back as a replica reads it, then an entry applied on top.
// Nothing may panic, every accepted file's tokens and indexes are at most
// its own index, and the first grant after it is above every restored token.
//
//	go test -run '^$' -fuzz FuzzRestoreBackup ./raftnode
func FuzzRestoreBackup(f *testing.F) {
	for _, tc := range untrustedCases(f) {
		f.Add(tc.file)
	}
	f.Add(okState(10).file(f))
	f.Add(validBackup(f))
	f.Add([]byte("RAFTLOCK-BACKUP\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, m, err := raftnode.DecodeBackup(bytes.NewReader(data))
		if err != nil {
			return
		}
		if info.Index > raftnode.MaxBackupIndex {
			t.Fatalf("accepted index %d above the cap", info.Index)
		}
		var top uint64
		m.Visit(fsm.Visitor{Lock: func(name string, index uint64, holders []fsm.Lock, _ bool, _ int64, _ fsm.Lock) error {
			for _, l := range holders {
				top = max(top, l.Token)
			}
			if index > info.Index {
				t.Fatalf("lock %q index %d above the file's %d", name, index, info.Index)
			}
			return nil
		}})
		if top > info.Index {
			t.Fatalf("accepted token %d above the file's index %d", top, info.Index)
		}
		at := info.Index + 1
		m.PrepareRestore(at, nil)
		var snap bytes.Buffer
		if _, err := m.Snapshot().WriteTo(&snap); err != nil {
			t.Fatal(err)
		}
		replica := fsm.New()
		if err := replica.Restore(&snap); err != nil {
			t.Fatalf("a prepared accepted backup does not restore: %v", err)
		}
		replica.ApplyCommand(at+1, 1, fsm.Command{Op: fsm.OpTick, Stamp: 1})
		r := replica.ApplyCommand(at+2, 1, fsm.Command{Op: fsm.OpAcquire, Name: "fuzz/new", Owner: "f",
			LeaseID: "lease-fuzz-0123456789", TTL: 1000, Stamp: 2})
		if r.Status == fsm.StatusOK && r.Lock.Token <= top {
			t.Fatalf("grant after the restore got token %d, not above the restored %d", r.Lock.Token, top)
		}
	})
}
