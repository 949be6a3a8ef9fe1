package raftnode_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/raftlock/raftlock/raftnode"
)

// A crafted backup: the fsm snapshot written field by field in the
// RAFTLOCK-SNAP version 3 encoding (fsm/snapshot.go), so that a test can
// put in what no API call would ever write, and the file around it with a
// correct checksum, as anyone can make one.

type rawLease struct {
	owner, leaseID   string
	token            uint64
	ttl, delay, dead int64 // ms, ms, ns
	value, session   string
	mode             byte
	slot             uint64
	limit            int64
}

type rawLock struct {
	name    string
	index   uint64
	holders []rawLease
}

type rawSession struct {
	id, owner        string
	ttl, delay, dead int64
	index            uint64
}

type rawState struct {
	now      int64
	index    uint64 // the clock's index
	locks    []rawLock
	nodes    [][2]string
	sessions []rawSession
	floor    uint64
	tombs    []rawLock // name and index only
}

func (s rawState) encode() []byte {
	b := []byte("RAFTLOCK-SNAP")
	b = binary.AppendUvarint(b, 3)
	b = binary.AppendVarint(b, s.now)
	b = binary.AppendUvarint(b, 1) // term
	b = binary.AppendVarint(b, 0)  // stamp
	b = binary.AppendUvarint(b, s.index)
	str := func(v string) { b = binary.AppendUvarint(b, uint64(len(v))); b = append(b, v...) }
	b = binary.AppendUvarint(b, uint64(len(s.locks)))
	for _, l := range s.locks {
		str(l.name)
		b = binary.AppendUvarint(b, l.index)
		b = append(b, 0) // not in a lock-delay
		b = binary.AppendUvarint(b, uint64(len(l.holders)))
		for _, h := range l.holders {
			str(h.owner)
			str(h.leaseID)
			b = binary.AppendUvarint(b, h.token)
			b = binary.AppendVarint(b, h.ttl)
			b = binary.AppendVarint(b, h.delay)
			b = binary.AppendVarint(b, h.dead)
			str(h.value)
			str(h.session)
			b = append(b, h.mode)
			b = binary.AppendUvarint(b, h.slot)
			b = binary.AppendVarint(b, h.limit)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(s.nodes)))
	for _, n := range s.nodes {
		str(n[0])
		str(n[1])
	}
	b = binary.AppendUvarint(b, uint64(len(s.sessions)))
	for _, x := range s.sessions {
		str(x.id)
		str(x.owner)
		b = binary.AppendVarint(b, x.ttl)
		b = binary.AppendVarint(b, x.delay)
		b = binary.AppendVarint(b, x.dead)
		b = binary.AppendUvarint(b, x.index)
	}
	b = binary.AppendUvarint(b, 0) // semaphores
	b = binary.AppendUvarint(b, s.floor)
	b = binary.AppendUvarint(b, uint64(len(s.tombs)))
	for _, t := range s.tombs {
		str(t.name)
		b = binary.AppendUvarint(b, t.index)
	}
	return b
}

// file is the backup file of s, header index = the clock's.
func (s rawState) file(t testing.TB) []byte {
	return craftFile(t, s.index, s.encode())
}

func craftFile(t testing.TB, index uint64, snap []byte) []byte {
	t.Helper()
	var f bytes.Buffer
	if _, err := raftnode.WriteBackup(&f, index, 1, snap); err != nil {
		t.Fatal(err)
	}
	return f.Bytes()
}

// okLease is a lease the API could have granted at token, the clock at 0.
func okLease(token uint64) rawLease {
	return rawLease{owner: "w", leaseID: "lease-crafted-0123456789", token: token, ttl: 60_000, dead: 60_000 * 1e6}
}

// okState is a valid state at index 69 holding one lock, "tok/x", granted
// at token: the API could have written it whenever token <= 69.
func okState(token uint64) rawState {
	return rawState{index: 69, locks: []rawLock{{name: "tok/x", index: max(token, 50), holders: []rawLease{okLease(token)}}}}
}
