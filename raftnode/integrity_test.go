package raftnode

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

// commandLog is a command entry as this version writes it.
func commandLog(index uint64, c fsm.Command, x extension) *raft.Log {
	data := c.Encode(nil)
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data, Extensions: encodeExtension(data, x)}
}

// One byte changed in a stored entry (LOCKNAME0150 →
// LOCKNAMEX150) was applied and served. Now every byte of the payload and
// of the extension is covered: the adapter stops, naming the index, and
// applies nothing.
func TestAdapterRefusesDamagedEntry(t *testing.T) {
	good := commandLog(7, fsm.Command{Op: fsm.OpAcquire, Name: "LOCKNAME0150", LeaseID: "L", TTL: 1000}, extension{})
	i := bytes.Index(good.Data, []byte("LOCKNAME0150")) + len("LOCKNAME")
	for name, damage := range map[string]func(l *raft.Log){
		"lock name":   func(l *raft.Log) { l.Data[i] = 'X' },
		"ttl":         func(l *raft.Log) { l.Data[len(l.Data)-1] ^= 1 },
		"checksum":    func(l *raft.Log) { l.Extensions[2] ^= 0x40 },
		"flags":       func(l *raft.Log) { l.Extensions[5] |= flagMark },
		"short ext":   func(l *raft.Log) { l.Extensions = l.Extensions[:3] },
		"check index": nil,
	} {
		l := &raft.Log{Index: good.Index, Term: good.Term, Type: good.Type,
			Data: bytes.Clone(good.Data), Extensions: bytes.Clone(good.Extensions)}
		if damage == nil { // a check whose leader hash or index was damaged
			l = commandLog(7, fsm.Command{Op: fsm.OpTick}, extension{flags: flagCheck, index: 3})
			l.Extensions[10] ^= 1
		} else {
			damage(l)
		}
		f := &raftFSM{m: fsm.New()}
		msg := applyPanic(f, l)
		if !strings.Contains(msg, "committed entry 7 is corrupt") {
			t.Errorf("%s: panic %q, want one naming entry 7 as corrupt", name, msg)
		}
		if f.m.Clock().Index != 0 || f.m.HeldCount() != 0 || f.last.Load() != 0 {
			t.Errorf("%s: the damaged entry was applied", name)
		}
	}
	// The undamaged entry applies.
	f := &raftFSM{m: fsm.New()}
	if msg := applyPanic(f, good); msg != "" {
		t.Fatalf("good entry: %s", msg)
	}
	if _, ok := f.m.Get("LOCKNAME0150"); !ok {
		t.Fatal("good entry not applied")
	}
}

// Entries written before checksums (no Extensions) stay readable, and an
// extension from a newer format stops the node asking for an upgrade.
func TestAdapterExtensionCompatibility(t *testing.T) {
	data := (&fsm.Command{Op: fsm.OpAcquire, Name: "a", LeaseID: "L", TTL: 1000}).Encode(nil)
	f := &raftFSM{m: fsm.New()}
	if msg := applyPanic(f, &raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: data}); msg != "" {
		t.Fatalf("entry without extension: %s", msg)
	}
	if _, ok := f.m.Get("a"); !ok || f.last.Load() != 1 {
		t.Fatal("entry without extension not applied")
	}
	msg := applyPanic(f, &raft.Log{Index: 2, Term: 1, Type: raft.LogCommand, Data: data, Extensions: []byte{0xC2, 0, 0, 0, 0, 0}})
	if !strings.Contains(msg, "committed entry 2 carries an extension this version does not know") || !strings.Contains(msg, "upgrade this node") {
		t.Fatalf("newer extension format: panic %q", msg)
	}
}

// Two replicas apply the same entries; one's state is altered behind the
// log's back. At a mark both hash their state; at the check each compares
// with the leader's hash: only the altered one flags itself.
func TestStateCheckFlagsOnlyTheAlteredReplica(t *testing.T) {
	good, bad := &raftFSM{m: fsm.New()}, &raftFSM{m: fsm.New()}
	both := func(l *raft.Log) {
		t.Helper()
		for _, f := range []*raftFSM{good, bad} {
			if msg := applyPanic(f, l); msg != "" {
				t.Fatal(msg)
			}
		}
	}
	both(commandLog(1, fsm.Command{Op: fsm.OpAcquire, Name: "a", LeaseID: "L", TTL: 1000}, extension{}))
	bad.m.ApplyCommand(1, 1, fsm.Command{Op: fsm.OpSetNode, NodeID: "ghost", NodeAddr: "x"}) // the damage
	both(commandLog(2, fsm.Command{Op: fsm.OpTick}, extension{flags: flagMark}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leaderHash, err := good.integrity.hashAt(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	both(commandLog(3, fsm.Command{Op: fsm.OpTick}, extension{flags: flagCheck, index: 2, hash: leaderHash}))
	deadline := time.Now().Add(10 * time.Second)
	for good.integrity.checked.Load() != 2 || bad.integrity.diverged.Load() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("good checked %d, bad diverged at %d", good.integrity.checked.Load(), bad.integrity.diverged.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if good.integrity.diverged.Load() != 0 || bad.integrity.checked.Load() != 0 {
		t.Fatal("the healthy replica flagged itself, or the altered one passed")
	}
}
