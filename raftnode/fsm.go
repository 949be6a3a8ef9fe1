package raftnode

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

// raftFSM adapts fsm.Machine to raft.FSM and raft.BatchingFSM.
type raftFSM struct {
	m *fsm.Machine
	// last is the highest index of a command or configuration entry this
	// adapter has applied: unlike raft's AppliedIndex, which counts entries
	// handed to the FSM goroutine, it says what the machine really holds.
	last atomic.Uint64
	// applied is called after every command entry, on Raft's FSM goroutine;
	// it must not block.
	applied func(index uint64, op fsm.Op, r fsm.Result)
	// restored is called after a snapshot replaced the machine's state.
	restored func()
	// integrity holds state hashes at marked entries; see integrity.go.
	integrity integrity
}

var _ raft.BatchingFSM = (*raftFSM)(nil)

// Apply and ApplyBatch answer a command entry with a *fsm.Result, nil for
// other entries.
func (f *raftFSM) Apply(l *raft.Log) any {
	var r fsm.Result
	if !f.applyOne(l, &r) {
		return nil
	}
	return &r
}

// ApplyBatch lets Raft hand over a whole batch of committed entries at
// once. Their results share one allocation: a Result is half a KiB, and
// boxed one by one they were a fifth of a follower's allocations.
func (f *raftFSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	results := make([]fsm.Result, len(logs))
	for i, l := range logs {
		if f.applyOne(l, &results[i]) {
			out[i] = &results[i]
		}
	}
	return out
}

// applyOne applies l, and for a command entry sets *r to its result and
// reports true.
func (f *raftFSM) applyOne(l *raft.Log, r *fsm.Result) bool {
	if l.Type != raft.LogCommand {
		f.last.Store(l.Index)
		return false
	}
	x, _ := f.verifyEntry(l) // before anything reads the payload
	cmd, err := fsm.DecodeCommand(l.Data)
	if errors.Is(err, fsm.ErrUnknownOp) {
		// Written by a newer version. Answering it "invalid" while upgraded
		// replicas apply it would split the cluster's state; stop instead.
		panic(fmt.Sprintf("raftnode: committed entry %d has op %d which this version does not know; upgrade this node (%v)", l.Index, opByte(l.Data), err))
	}
	if err != nil {
		// A committed entry every replica must apply alike: skipping it
		// here would let this replica diverge silently.
		panic(fmt.Sprintf("raftnode: undecodable committed entry %d: %v", l.Index, err))
	}
	*r = f.m.ApplyCommand(l.Index, l.Term, cmd)
	f.afterApply(l.Index, x)
	if f.applied != nil {
		f.applied(l.Index, cmd.Op, *r)
	}
	f.last.Store(l.Index) // not on a panic above: a refused entry is not applied
	return true
}

// opByte is the op of an encoded command (its second byte), for messages.
func opByte(data []byte) byte {
	if len(data) < 2 {
		return 0
	}
	return data[1]
}

func (f *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	return fsmSnapshot{f.m.Snapshot()}, nil
}

func (f *raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := f.m.Restore(rc); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	f.last.Store(f.m.Clock().Index)
	seededRestoreInstalled() // test builds only: crash point restore-installed (seeded_on.go)
	if f.restored != nil {
		f.restored()
	}
	return nil
}

type fsmSnapshot struct{ s *fsm.Snapshot }

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.s.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}
