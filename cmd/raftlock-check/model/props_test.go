package model

import (
	"strings"
	"testing"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

func TestMutualExclusion(t *testing.T) {
	clean := []history.Op{
		op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
		op("2", 1, history.Renew, "A", 1000, 500, 510, history.OK, 5),
		op("3", 1, history.Release, "A", 0, 1200, 1210, history.OK, 0),
		// B is granted after A's release was sent: no overlap.
		op("4", 2, history.Acquire, "B", 1000, 1205, 1300, history.OK, 9),
		// C's grant comes after B's send+ttl×(1−drift): B stopped trusting it.
		op("5", 3, history.Acquire, "C", 1000, 2190, 2200, history.OK, 12),
	}
	if vs := MutualExclusion(clean, 0.02); len(vs) != 0 {
		t.Fatalf("clean history: %v", vs)
	}
	violating := append(clean[:4:4],
		// C granted while B (sent 1205, ttl 1 s) is still trusted until 2185.
		op("5", 3, history.Acquire, "C", 1000, 1500, 1600, history.OK, 12))
	vs := MutualExclusion(violating, 0.02)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "c2") || !strings.Contains(vs[0].Detail, "c3") {
		t.Fatalf("want one violation between c2 and c3, got %v", vs)
	}
}

func TestTokens(t *testing.T) {
	clean := []history.Op{
		op("1", 1, history.Acquire, "A", 1000, 0, 0, history.Unknown, 0),
		op("2", 1, history.Acquire, "A", 1000, 10, 20, history.OK, 5), // retry
		op("3", 1, history.Renew, "A", 1000, 300, 310, history.OK, 5),
		op("4", 1, history.Release, "A", 0, 400, 410, history.OK, 0),
		op("5", 2, history.Acquire, "B", 1000, 500, 510, history.OK, 9),
	}
	if vs := Tokens(clean); len(vs) != 0 {
		t.Fatalf("clean history: %v", vs)
	}
	for name, bad := range map[string][]history.Op{
		"token goes down":         {clean[1], clean[3], op("5", 2, history.Acquire, "B", 1000, 500, 510, history.OK, 4)},
		"retry got another token": {clean[0], clean[1], op("3", 1, history.Acquire, "A", 1000, 100, 110, history.OK, 6)},
		"token granted twice":     {clean[1], clean[3], op("5", 2, history.Acquire, "B", 1000, 500, 510, history.OK, 5)},
	} {
		if vs := Tokens(bad); len(vs) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
	// A retry sent while the lease held but answered after its TTL (the
	// leader it reached was paused) may have been applied after the lease
	// ended: a fresh grant with a new token is then the right answer.
	late := []history.Op{clean[1], op("3", 1, history.Acquire, "A", 1000, 30, 1400, history.OK, 8)}
	if vs := Tokens(late); len(vs) != 0 {
		t.Errorf("a retry answered after the lease's TTL was judged as held: %v", vs)
	}
}

func TestRegisters(t *testing.T) {
	w := func(seq int, fenced bool, opID string, tok uint64, lost ...string) history.Access {
		return history.Access{Seq: seq, Fenced: fenced, Name: "L", Write: true, OpID: opID, Token: tok, Accepted: true, Lost: lost}
	}
	ops := []history.Op{{ID: "w1", Kind: history.FWrite, Outcome: history.OK}, {ID: "w2", Kind: history.FWrite, Outcome: history.OK}}
	clean := []history.Access{
		w(0, true, "w1", 5), w(1, true, "w2", 9),
		{Seq: 2, Fenced: true, Name: "L", Write: true, OpID: "w3", Token: 5}, // refused
		w(3, false, "u1", 5), w(4, false, "u2", 9, "u1"),
	}
	r := Registers(clean, ops)
	if len(r.Violations) != 0 || r.UnfencedLost != 1 || r.FencedRejected != 1 {
		t.Fatalf("clean: %+v", r)
	}
	for name, bad := range map[string][]history.Access{
		"fenced accepted a lower token":  {w(0, true, "w1", 9), w(1, true, "w2", 5), clean[3], clean[4]},
		"fenced lost a write":            {w(0, true, "w1", 5), w(1, true, "w2", 9, "w1"), clean[3], clean[4]},
		"acknowledged write not in log":  {w(0, true, "w1", 5), clean[3], clean[4]},
		"unfenced never lost (too weak)": {clean[0], clean[1], clean[3]},
	} {
		if r := Registers(bad, ops); len(r.Violations) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}

func TestFinalState(t *testing.T) {
	ops := []history.Op{op("1", 0, history.Acquire, "F", 60000, 0, 10, history.OK, 40)}
	held := []LockView{{Name: "L", Owner: "final", Token: 40, TTLMs: 45000}}
	expect := []Expect{{Name: "L", Held: true, Owner: "final", Token: 40, TTLMs: 45000}, {Name: "M"}}
	good := []NodeState{{ID: "n1", Applied: 50, Locks: held}, {ID: "n2", Applied: 50, Locks: held}}
	if vs := FinalState(good, expect, ops); len(vs) != 0 {
		t.Fatalf("clean: %v", vs)
	}
	for name, bad := range map[string][]NodeState{
		"renew lost on one node": {good[0], {ID: "n2", Applied: 50, Locks: []LockView{{Name: "L", Owner: "final", Token: 40, TTLMs: 60000}}}},
		"release lost":           {good[0], {ID: "n2", Applied: 50, Locks: append(held, LockView{Name: "M", Owner: "final", Token: 45})}},
		"log behind":             {good[0], {ID: "n2", Applied: 30, Locks: held}},
		"node unreadable":        {good[0], {ID: "n2", Err: "connection refused"}},
	} {
		if vs := FinalState(bad, expect, ops); len(vs) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}

func TestIndexOrder(t *testing.T) {
	read := func(id string, client int, call, ret int64, out string, ask, idx uint64) history.Op {
		o := op(id, client, history.Read, "", 0, call, ret, out, 0)
		o.AskIndex, o.Index = ask, idx
		return o
	}
	clean := []history.Op{
		read("1", 1, 0, 10, history.Free, 0, 0),
		read("2", 2, 20, 30, history.OK, 0, 7),
		// Overlaps read 4, which saw 9: it may be linearized before it.
		read("3", 1, 40, 100, history.OK, 7, 7),
		read("4", 2, 50, 60, history.OK, 7, 9),
		// A blocking read that timed out answers the index it asked for.
		read("5", 3, 110, 700, history.OK, 9, 9),
		read("6", 1, 800, 810, history.Free, 0, 12),
		// Unknown reads never returned: left out.
		read("7", 2, 900, 0, history.Unknown, 0, 0),
	}
	if vs := IndexOrder(clean); len(vs) != 0 {
		t.Fatalf("clean history: %v", vs)
	}
	violating := append(clean[:6:6],
		// Sent after read 6 returned index 12, yet answers 9.
		read("8", 3, 850, 1200, history.OK, 9, 9))
	vs := IndexOrder(violating)
	if len(vs) != 1 || vs[0].Property != "f" || !strings.Contains(vs[0].Detail, "index 9, below index 12") {
		t.Fatalf("want one violation (index 9 after 12), got %v", vs)
	}
}
