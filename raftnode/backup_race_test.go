package raftnode_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

// A backup restore raises every lock's index to the index Raft installs it
// at. Commands that landed while the restore prepared a big backup (found
// by the second independent review: 953 of 1,703 locks written around the
// restore read a lower index after it) got indexes above the one the
// restored state claimed, so a watcher saw an index go down. Writes keep
// coming here during the whole restore; none may read lower afterwards.
func TestRestoreDuringWritesNeverLowersAnIndex(t *testing.T) {
	c := testenv.Start(t, 1)
	leader := c.Leader()
	ctx := testenv.Context(t, 2*time.Minute)

	// A big backup from early in the cluster's life (every lock granted at
	// index 1, only so it is built fast): preparing it takes long enough
	// for many writes, and its index is below the cluster's.
	m := fsm.New()
	for i := 0; i < 100_000; i++ {
		m.ApplyCommand(1, 1, fsm.Command{Version: 2, StampTerm: 1, Op: fsm.OpAcquire,
			Name: fmt.Sprintf("bulk/%06d", i), Owner: "o", LeaseID: fmt.Sprintf("lease-%06d-0123456789", i), TTL: 600_000})
	}
	var snap, file bytes.Buffer
	if _, err := m.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	if _, err := raftnode.WriteBackup(&file, 1, 1, snap.Bytes()); err != nil {
		t.Fatal(err)
	}

	type grant struct {
		name  string
		index uint64
	}
	var mu sync.Mutex
	var grants []grant
	stop := make(chan struct{})
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("w/%d", i)
			r, err := leader.Apply(context.Background(), fsm.Command{Op: fsm.OpAcquire, Name: name, Owner: "w",
				LeaseID: fmt.Sprintf("lease-w-%06d-0123456789", i), TTL: 600_000})
			if err == nil && r.Status == fsm.StatusOK {
				mu.Lock()
				grants = append(grants, grant{name, r.Lock.Index})
				mu.Unlock()
			}
			if i == 0 {
				close(started)
			}
		}
	}()
	<-started
	// Built here, the file has no cluster id.
	if _, err := leader.RestoreBackupWith(ctx, bytes.NewReader(file.Bytes()), raftnode.RestoreOptions{AllowOtherCluster: true}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(grants) == 0 {
		t.Fatal("no write was granted around the restore")
	}
	lowered := 0
	var example string
	for _, g := range grants {
		if after := leader.Machine().Index(g.name); after < g.index {
			lowered++
			if example == "" {
				example = fmt.Sprintf("%s: index %d before the restore, %d after", g.name, g.index, after)
			}
		}
	}
	t.Logf("%d writes granted around the restore", len(grants))
	if lowered > 0 {
		t.Fatalf("%d of %d locks written around the restore read a lower index after it (e.g. %s)", lowered, len(grants), example)
	}
}
