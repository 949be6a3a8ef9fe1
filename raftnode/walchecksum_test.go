package raftnode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/raftnode/logstore"
)

// openWALLog opens dir's raft.db and its log in the WAL, as a node does;
// close closes both.
func openWALLog(t *testing.T, dir string) (logs raft.LogStore, close func()) {
	t.Helper()
	bolt, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	logs, closer, err := logstore.Open(dir, LogStoreWAL, bolt, hclog.NewNullLogger())
	if err != nil {
		bolt.Close()
		t.Fatal(err)
	}
	return logs, func() {
		if err := closer.Close(); err != nil {
			t.Error(err)
		}
		if err := bolt.Close(); err != nil {
			t.Error(err)
		}
	}
}

// raft-wal checks only the last batch: it trusts the file system with what
// it fsynced before. A byte changed later inside an older batch is read back
// as is; raftlock's entry checksum (Log.Extensions) is what catches it, and
// the FSM adapter refuses to apply such an entry (TestAdapterRefusesDamagedEntry).
func TestWALOlderBatchDamageCaughtByEntryChecksum(t *testing.T) {
	dir := t.TempDir()
	logs, closeLogs := openWALLog(t, dir)
	for _, b := range [][2]uint64{{1, 10}, {11, 20}, {21, 30}} { // three batches, three fsyncs
		var batch []*raft.Log
		for i := b[0]; i <= b[1]; i++ {
			batch = append(batch, commandLog(i, fsm.Command{Op: fsm.OpAcquire, Name: fmt.Sprintf("lock-%06d", i), LeaseID: "L", TTL: 1000}, extension{}))
		}
		if err := logs.StoreLogs(batch); err != nil {
			t.Fatal(err)
		}
	}
	closeLogs()

	segs, err := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segment files: %v, %v", segs, err)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	marker := []byte("lock-000005")
	if n := bytes.Count(b, marker); n != 1 {
		t.Fatalf("%q found %d times in %s", marker, n, segs[0])
	}
	b[bytes.Index(b, marker)+len(marker)-1] ^= 0x01
	if err := os.WriteFile(segs[0], b, 0o600); err != nil {
		t.Fatal(err)
	}

	logs, closeLogs = openWALLog(t, dir)
	defer closeLogs()
	if last, err := logs.LastIndex(); err != nil || last != 30 {
		t.Fatalf("last index %d, %v: want 30 (raft-wal does not look at older batches)", last, err)
	}
	var l raft.Log
	if err := logs.GetLog(5, &l); err != nil {
		t.Fatal(err)
	}
	if _, _, err := decodeExtension(l.Data, l.Extensions); !errors.Is(err, errCorrupt) {
		t.Fatalf("damaged entry 5: decodeExtension err = %v, want errCorrupt", err)
	}
}
