package raftnode_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

// The format rule during a rolling upgrade: member n3 reports a build that
// reads command format 4 at most, so sessions are refused (503
// not_supported_yet, docs/API.md). A backup that holds a session, restored
// into that cluster, is a version 3 snapshot: restoring it sets the state's
// format-5 mark (fsm.Machine.ProvenCommandVersion), whose premise is that
// only builds reading format 5 hold the state. A user restore makes that
// true by stranding n3 (its build cannot install the snapshot the leader
// sends it) rather than by anything n3 applied, and the leader then writes
// format 5 whatever its survey says: session writes are accepted with a
// member that cannot read them, and the cluster has silently lost n3. The
// restore should be refused (or the format rule keep refusing sessions) while a
// member reads less than the backup needs.
func TestRestoreDoesNotBypassTheFormatRule(t *testing.T) {
	old := testenv.Options{Configure: func(cfg *raftnode.Config) {
		fetch := cfg.FetchProgress
		cfg.FetchProgress = func(ctx context.Context, id, addr string) (nodeapi.Progress, error) {
			p, err := fetch(ctx, id, addr)
			if id == "n3" && err == nil {
				p.CommandVersion = 4 // an older build
			}
			return p, err
		}
	}}
	a := testenv.Start(t, 3, old)
	b := testenv.Start(t, 1)
	ctx := testenv.Context(t, 20*time.Second)
	sid := "session-restored-0123456789abcdef"
	if r, err := b.Leader().Apply(ctx, fsm.Command{Op: fsm.OpSessionCreate, SessionID: sid, Owner: "w", TTL: 60_000}); err != nil || r.Status != fsm.StatusOK {
		t.Fatalf("session on b: %+v %v", r, err)
	}
	var backup bytes.Buffer
	if _, err := b.Leader().Backup(ctx, &backup); err != nil {
		t.Fatal(err)
	}
	leader := a.Leader()
	if leader.ID == "n3" { // the leader surveys the others, not itself
		if err := leader.TransferLeadership(ctx, "n1"); err != nil {
			t.Fatal(err)
		}
		leader = a.WaitForNewLeader(leader)
	}
	other := "session-other-0123456789abcdef00"
	create := func(id string) (fsm.Result, error) {
		return leader.Apply(ctx, fsm.Command{Op: fsm.OpSessionCreate, SessionID: id, Owner: "w", TTL: 60_000})
	}
	if r, err := create(other); !errors.Is(err, raftnode.ErrNotSupportedYet) {
		t.Fatalf("precondition: with n3 at format 4 a session create must be refused, got %+v %v", r, err)
	}
	if _, err := leader.RestoreBackupWith(ctx, bytes.NewReader(backup.Bytes()), raftnode.RestoreOptions{AllowOtherCluster: true}); err != nil {
		return // refused: sound
	}
	r, err := create(other)
	if !errors.Is(err, raftnode.ErrNotSupportedYet) {
		t.Errorf("after the restore, a session create with n3 at format 4 answers %+v, %v (leader writes format %d); want 503 not_supported_yet",
			r.Status, err, leader.CommandVersion())
	}
}
