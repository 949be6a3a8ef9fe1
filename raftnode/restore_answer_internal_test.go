package raftnode

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// raft.Restore (hashicorp/raft v1.7.3 api.go) installs the backup first and
// only then enqueues its no-op, under one timer started before the install:
// when the install outlasts the timer, the no-op's select has the fired
// timer and the leader loop's applyCh both ready and picks one at random,
// so about every second such restore returns ErrEnqueueTimeout with the
// backup installed on the leader (and sent to the followers by
// replication within a CommitTimeout). installBackup passes that through
// raftError, which reads ErrEnqueueTimeout as "never reached the log"
// (ErrOverloaded: 429 overloaded, "nothing applied" in docs/API.md's
// table); an ErrNotLeader or ErrLeadershipTransferInProgress for the no-op
// after the install is likewise answered 503 no_leader, "nothing applied:
// certain". The leader then steps down to the follower most caught up, the
// restore included, and the cluster commits it: the client was told
// nothing changed, and everything did.
//
// The install is made to outlast the timer by holding the leader's FSM
// restore until the restore's deadline has passed (as a large file whose
// upload and decoding used up the handler's ten minutes would). Each try
// that answers "nothing applied" must leave the backup uncommitted; a try
// whose no-op won the race answers 200 and shows nothing.
func TestRestoreAnsweredNothingAppliedIsNotCommittedLater(t *testing.T) {
	tr := startTrio(t, Config{})
	var hold atomic.Pointer[context.Context] // the restore whose deadline the leader's FSM restore waits out
	for _, n := range tr.nodes {
		next := n.fsm.restored // set before any snapshot exists: nothing reads it yet
		n.fsm.restored = func() {
			if p := hold.Swap(nil); p != nil {
				<-(*p).Done()
				time.Sleep(20 * time.Millisecond) // past raft's timer, which fires at the same deadline
			}
			next()
		}
	}
	ctx := context.Background()
	lease := "lease-" + strings.Repeat("a", 16)
	held := func(n *Node) bool {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		r, err := n.Read(rctx, false)
		if err != nil {
			return false
		}
		l, ok := r.Get("A")
		return ok && l.LeaseID == lease
	}
	leader := tr.leader()
	if r, err := leader.Apply(ctx, fsm.Command{Op: fsm.OpAcquire, Name: "A", LeaseID: lease, TTL: 600_000}); err != nil || r.Status != fsm.StatusOK {
		t.Fatalf("acquire A: %+v %v", r, err)
	}
	var backup bytes.Buffer
	if _, err := leader.Backup(ctx, &backup); err != nil {
		t.Fatal(err)
	}
	lied := 0
	for try := 0; try < 20 && lied == 0; try++ { // each try shows it with probability 1/2
		// The last try's failed restore made its leader step down: wait
		// for the next one to take the release.
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			leader = tr.leader()
			r, err := leader.Apply(ctx, fsm.Command{Op: fsm.OpRelease, Name: "A", LeaseID: lease})
			if err == nil {
				break
			}
			moving := errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) || errors.Is(err, ErrLeaderChanged) || errors.Is(err, ErrIndeterminate)
			if !moving || time.Now().After(end) {
				t.Fatalf("release A before try %d: %+v %v", try, r, err)
			}
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		hold.Store(&rctx)
		_, err := leader.RestoreBackupWith(rctx, bytes.NewReader(backup.Bytes()), RestoreOptions{})
		cancel()
		hold.Store(nil)
		nothingApplied := err != nil && !errors.Is(err, ErrIndeterminate) &&
			(errors.Is(err, ErrOverloaded) || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader))
		t.Logf("try %d: restore answered %v (nothing applied: %v)", try, err, nothingApplied)
		if !nothingApplied {
			continue
		}
		lied++
		// Bounded: the step-down and the new leader's Barrier take well under
		// this; a restore still uncommitted then never commits (the leader
		// that held it lost it).
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			for _, n := range tr.nodes {
				if n.IsLeader() && n.readyTerm.Load() == n.raft.CurrentTerm() && held(n) {
					t.Fatalf("the restore answered %v, \"nothing applied\" (429/503), yet leader %s (term %d) serves the backup's lock A as committed state",
						err, n.cfg.ID, n.raft.CurrentTerm())
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if lied == 0 {
		t.Log("no try answered \"nothing applied\" (the no-op won every race): nothing shown")
	}
}
