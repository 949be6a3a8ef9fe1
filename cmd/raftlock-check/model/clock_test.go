package model

import (
	"testing"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// A slow client clock trusts a lease longer in real time, and (a) must
// judge it by that: a grant 2,980 ms after a 3 s lease's send is safe for a
// client at rate 1 (trusts 2,970 ms) and not for one at rate 0.99 (3,000 ms).
func TestClientClocksStretchTrust(t *testing.T) {
	ms := int64(time.Millisecond)
	ops := []history.Op{
		{ID: "1", Client: 1, Kind: history.Acquire, Name: "x", Lease: "a", TTLMs: 3000, Call: 0, Return: 5 * ms, Outcome: history.OK},
		{ID: "2", Client: 2, Kind: history.Acquire, Name: "x", Lease: "b", TTLMs: 3000, Call: 2900 * ms, Return: 2980 * ms, Outcome: history.OK},
	}
	if vs := MutualExclusion(ClientClocks(ops, nil, 0), 0.01); len(vs) != 0 {
		t.Fatalf("rate 1: %v", vs)
	}
	if vs := MutualExclusion(ClientClocks(ops, map[int]float64{1: 0.99}, 0), 0.01); len(vs) == 0 {
		t.Fatal("rate 0.99: the overlap was not seen")
	}
	got := ClientClocks(ops, map[int]float64{1: 1.01}, 0.01)
	if got[0].TTLMs != 2940 || got[1].TTLMs != 2970 || ops[0].TTLMs != 3000 {
		t.Fatalf("cut 0.01: TTLs %d, %d (input %d)", got[0].TTLMs, got[1].TTLMs, ops[0].TTLMs)
	}
}
