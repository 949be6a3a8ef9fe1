package raftnode_test

// Docs/API.md promises "an index never goes
// down", but a backup restored through Raft brought back the backup's lock
// indexes and tombstones, so a lock taken after the backup read free with an
// index below one a previous read had returned; a watcher waiting past that
// index parked through the restore, and the client's Observe dropped the
// answer, reporting the vanished holder for good. The restore now raises
// every index to its own.

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

func TestRestoreNeverLowersAnIndex(t *testing.T) {
	c := testenv.Start(t, 3)
	leader := c.Leader()
	var file bytes.Buffer
	if _, err := leader.Backup(testenv.Context(t, 10*time.Second), &file); err != nil {
		t.Fatal(err)
	}
	if status, body := acquire(t, leader, "b", "y", "lease-y-0123456789abcd", 600000); status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	before := leader.Machine().Index("b")
	if _, err := leader.RestoreBackupWith(testenv.Context(t, 10*time.Second), bytes.NewReader(file.Bytes()), raftnode.RestoreOptions{}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	after := leader.Machine().Index("b")
	if after <= before {
		t.Fatalf("index of b went from %d to %d across a restore; an index never goes down", before, after)
	}
	status, body := call(t, "GET", leader.URL()+"/v1/locks/b?index="+itoa(before)+"&wait_ms=5000", nil)
	if status != 200 || body["held"] != false || body["index"] != float64(after) {
		t.Fatalf("blocking read from %d answered %d %v; want b free at index %d", before, status, body, after)
	}
}

func itoa(u uint64) string { return strconv.FormatUint(u, 10) }
