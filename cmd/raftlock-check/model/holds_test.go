package model

import (
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// sop builds a session op on session sid (times in ms, as op).
func sop(id string, client int, kind, sid string, ttl, call, ret int64, out string) history.Op {
	o := op(id, client, kind, "", ttl, call, ret, out, 0)
	o.Name, o.Session = "", sid
	return o
}

// inSession binds a lock or permit op to session sid (no TTL of its own).
func inSession(o history.Op, sid string) history.Op {
	o.Session, o.TTLMs = sid, 0
	return o
}

func shared(o history.Op) history.Op {
	o.Mode = history.Shared
	return o
}

// permit turns a lock op into a semaphore op on "S" with the given limit
// and answered slot.
func permit(o history.Op, limit int64, slot int) history.Op {
	switch o.Kind {
	case history.Acquire:
		o.Kind, o.Limit = history.SemAcquire, limit
	case history.Renew:
		o.Kind = history.SemRenew
	case history.Release:
		o.Kind = history.SemRelease
	}
	o.Name = "S"
	if o.Outcome == history.OK && o.Kind != history.SemRelease {
		o.GotLimit, o.Slot = limit, slot
	}
	return o
}

func props(vs []Violation) string {
	var ids []string
	for _, v := range vs {
		ids = append(ids, v.Property)
	}
	return strings.Join(ids, ",")
}

func TestSessionLeases(t *testing.T) {
	// Session S (ttl 1 s) holds L for c1; drift 2 %.
	base := []history.Op{
		sop("1", 1, history.SessCreate, "S", 1000, 0, 10, history.OK),
		inSession(op("2", 1, history.Acquire, "A", 0, 20, 30, history.OK, 5), "S"),
	}
	cases := []struct {
		name  string
		extra []history.Op
		want  string // properties broken
	}{
		{"closed, then granted to another", []history.Op{
			sop("3", 1, history.SessRenew, "S", 1000, 500, 510, history.OK),
			sop("4", 1, history.SessClose, "S", 0, 1200, 1210, history.OK),
			op("5", 2, history.Acquire, "B", 1000, 1205, 1300, history.OK, 9),
		}, ""},
		{"granted to another while the renewed session must hold", []history.Op{
			sop("3", 1, history.SessRenew, "S", 1000, 500, 510, history.OK),
			op("5", 2, history.Acquire, "B", 1000, 900, 1000, history.OK, 9),
		}, "a"},
		{"granted to another once the unrenewed session's ttl ran out (a pause)", []history.Op{
			op("5", 2, history.Acquire, "B", 1000, 950, 1000, history.OK, 9),
		}, ""},
		{"session renewed only after its deadline: its lock was not trusted meanwhile", []history.Op{
			sop("3", 1, history.SessRenew, "S", 1000, 1100, 1110, history.OK),
			op("5", 2, history.Acquire, "B", 1000, 1150, 1200, history.OK, 9),
		}, ""},
		{"session renewed before its deadline keeps its lock", []history.Op{
			sop("3", 1, history.SessRenew, "S", 1000, 900, 910, history.OK),
			op("5", 2, history.Acquire, "B", 1000, 1150, 1200, history.OK, 9),
		}, "a"},
		{"a re-create does not vouch for the old session's locks", []history.Op{
			sop("3", 1, history.SessCreate, "S", 1000, 900, 910, history.OK),
			op("5", 2, history.Acquire, "B", 1000, 1150, 1200, history.OK, 9),
		}, ""},
		{"lease released before the session ends", []history.Op{
			sop("3", 1, history.SessRenew, "S", 1000, 500, 510, history.OK),
			op("4", 1, history.Release, "A", 0, 600, 610, history.OK, 0),
			op("5", 2, history.Acquire, "B", 1000, 605, 700, history.OK, 9),
		}, ""},
		{"two locks of one session: both must end with it", []history.Op{
			inSession(func() history.Op {
				o := op("3", 1, history.Acquire, "A2", 0, 40, 50, history.OK, 6)
				o.Name = "M"
				return o
			}(), "S"),
			sop("4", 1, history.SessRenew, "S", 1000, 500, 510, history.OK),
			func() history.Op {
				o := op("5", 2, history.Acquire, "B", 1000, 900, 1000, history.OK, 9)
				o.Name = "M"
				return o
			}(),
		}, "a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops := append(append([]history.Op(nil), base...), c.extra...)
			if got := props(MutualExclusion(ops, 0.02)); got != c.want {
				t.Fatalf("violations %q, want %q: %v", got, c.want, MutualExclusion(ops, 0.02))
			}
		})
	}
}

func TestSharedLocks(t *testing.T) {
	cases := []struct {
		name string
		ops  []history.Op
		want string
	}{
		{"readers coexist", []history.Op{
			shared(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5)),
			shared(op("2", 2, history.Acquire, "B", 1000, 20, 30, history.OK, 6)),
		}, ""},
		{"a writer after the readers released", []history.Op{
			shared(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5)),
			shared(op("2", 2, history.Acquire, "B", 1000, 20, 30, history.OK, 6)),
			op("3", 1, history.Release, "A", 0, 100, 110, history.OK, 0),
			op("4", 2, history.Release, "B", 0, 120, 130, history.OK, 0),
			op("5", 3, history.Acquire, "C", 1000, 125, 140, history.OK, 9),
		}, ""},
		{"a writer while a reader holds", []history.Op{
			shared(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5)),
			shared(op("2", 2, history.Acquire, "B", 1000, 20, 30, history.OK, 6)),
			op("3", 1, history.Release, "A", 0, 100, 110, history.OK, 0),
			op("5", 3, history.Acquire, "C", 1000, 125, 140, history.OK, 9),
		}, "j"},
		{"a reader while a writer holds", []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			shared(op("2", 2, history.Acquire, "B", 1000, 20, 30, history.OK, 6)),
		}, "j"},
		{"a session's reader and a writer", []history.Op{
			sop("1", 1, history.SessCreate, "S", 1000, 0, 10, history.OK),
			inSession(shared(op("2", 1, history.Acquire, "A", 0, 20, 30, history.OK, 5)), "S"),
			op("3", 2, history.Acquire, "B", 1000, 500, 510, history.OK, 6),
		}, "j"},
		{"two writers", []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 2, history.Acquire, "B", 1000, 20, 30, history.OK, 6),
		}, "a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := props(MutualExclusion(c.ops, 0.02)); got != c.want {
				t.Fatalf("violations %q, want %q: %v", got, c.want, MutualExclusion(c.ops, 0.02))
			}
		})
	}
	// An exclusive grant's token exceeds every earlier grant's, shared ones
	// included: (b) covers every mode.
	late := []history.Op{
		shared(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 7)),
		op("2", 1, history.Release, "A", 0, 20, 30, history.OK, 0),
		op("3", 2, history.Acquire, "B", 1000, 40, 50, history.OK, 6),
	}
	if vs := Tokens(late); len(vs) != 1 || vs[0].Property != "b" {
		t.Fatalf("exclusive grant below an earlier shared one: %v", vs)
	}
	late[2].Token = 8
	if vs := Tokens(late); len(vs) != 0 {
		t.Fatalf("clean: %v", vs)
	}
}

func TestPermits(t *testing.T) {
	// Semaphore S, limit 2.
	a := permit(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), 2, 0)
	b := permit(op("2", 2, history.Acquire, "B", 1000, 20, 30, history.OK, 6), 2, 1)
	relA := permit(op("3", 1, history.Release, "A", 0, 100, 110, history.OK, 0), 2, 0)
	cases := []struct {
		name string
		ops  []history.Op
		want string
	}{
		{"two permits of two", []history.Op{a, b}, ""},
		{"a third after one was released, in its slot", []history.Op{a, b, relA,
			permit(op("4", 3, history.Acquire, "C", 1000, 105, 120, history.OK, 9), 2, 0)}, ""},
		{"limit+1 permits valid at once", []history.Op{a, b,
			permit(op("4", 3, history.Acquire, "C", 1000, 105, 120, history.OK, 9), 2, 1)}, "i,i"},
		{"two valid permits in one slot", []history.Op{a,
			permit(op("2", 2, history.Acquire, "B", 1000, 20, 30, history.OK, 6), 2, 0)}, "i"},
		{"a permit with another limit while one is held", []history.Op{a,
			permit(op("2", 2, history.Acquire, "B", 1000, 20, 30, history.OK, 6), 3, 1)}, "i"},
		{"a permit of an unrenewed session, after its ttl", []history.Op{
			sop("0", 1, history.SessCreate, "T", 1000, 0, 5, history.OK),
			inSession(permit(op("1", 1, history.Acquire, "A", 0, 10, 20, history.OK, 5), 1, 0), "T"),
			permit(op("2", 2, history.Acquire, "B", 1000, 990, 1000, history.OK, 6), 1, 0)}, ""},
		{"a permit of a session that must still hold, given away", []history.Op{
			sop("0", 1, history.SessCreate, "T", 1000, 0, 5, history.OK),
			inSession(permit(op("1", 1, history.Acquire, "A", 0, 10, 20, history.OK, 5), 1, 0), "T"),
			permit(op("2", 2, history.Acquire, "B", 1000, 500, 510, history.OK, 6), 1, 0)}, "i,i"},
		{"a lock and a semaphore of one name are unrelated", []history.Op{a, b,
			op("4", 3, history.Acquire, "C", 1000, 25, 35, history.OK, 9)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vs := append(Permits(c.ops, 0.02), MutualExclusion(c.ops, 0.02)...)
			if got := props(vs); got != c.want {
				t.Fatalf("violations %q, want %q: %v", got, c.want, vs)
			}
		})
	}
}

func TestPermitTokens(t *testing.T) {
	clean := []history.Op{
		permit(op("1", 1, history.Acquire, "A", 1000, 0, 0, history.Unknown, 0), 2, 0),
		permit(op("2", 1, history.Acquire, "A", 1000, 10, 20, history.OK, 5), 2, 0), // retry
		permit(op("3", 2, history.Acquire, "B", 1000, 30, 40, history.OK, 7), 2, 1),
		permit(op("4", 1, history.Renew, "A", 1000, 300, 310, history.OK, 5), 2, 0),
		permit(op("5", 1, history.Release, "A", 0, 400, 410, history.OK, 0), 2, 0),
		permit(op("6", 3, history.Acquire, "C", 1000, 500, 510, history.OK, 9), 2, 0),
		// Slot 1's token 7 is above slot 0's 5 and below its 9: tokens
		// rise per slot, not across them... and they do here anyway.
	}
	if vs := append(PermitTokens(clean), HoldsKept(clean)...); len(vs) != 0 {
		t.Fatalf("clean: %v", vs)
	}
	bad := map[string][]history.Op{
		"slot's token goes down": {clean[1], clean[4],
			permit(op("6", 3, history.Acquire, "C", 1000, 500, 510, history.OK, 4), 2, 0)},
		"token granted twice": {clean[1],
			permit(op("3", 2, history.Acquire, "B", 1000, 30, 40, history.OK, 5), 2, 1)},
		"slot outside the limit": {
			permit(op("2", 1, history.Acquire, "A", 1000, 10, 20, history.OK, 5), 2, 2)},
		"granted with a limit not asked": {func() history.Op {
			o := permit(op("2", 1, history.Acquire, "A", 1000, 10, 20, history.OK, 5), 2, 0)
			o.GotLimit = 3
			return o
		}()},
		"retry moved to another slot": {clean[1],
			permit(op("7", 1, history.Acquire, "A", 1000, 50, 60, history.OK, 5), 2, 1)},
		"retry got another token": {clean[1],
			permit(op("7", 1, history.Acquire, "A", 1000, 50, 60, history.OK, 11), 2, 0)},
	}
	for name, ops := range bad {
		vs := append(PermitTokens(ops), HoldsKept(ops)...)
		if len(vs) == 0 || vs[0].Property != "i" {
			t.Errorf("%s: not caught as (i): %v", name, vs)
		}
	}
}

func TestSessionHoldsKept(t *testing.T) {
	base := []history.Op{
		sop("1", 1, history.SessCreate, "S", 1000, 0, 10, history.OK),
		inSession(op("2", 1, history.Acquire, "A", 0, 20, 30, history.OK, 5), "S"),
	}
	retry := inSession(op("3", 1, history.Acquire, "A", 0, 500, 510, history.OK, 5), "S")
	if vs := HoldsKept(append(base, retry)); len(vs) != 0 {
		t.Fatalf("retry with the same token: %v", vs)
	}
	retry.Token = 8
	if vs := HoldsKept(append(base, retry)); props(vs) != "h" {
		t.Fatalf("retry with a new token while the session holds: %v", vs)
	}
	// After the session's ttl the lease may be gone: a new token is fine.
	retry.Call, retry.Return = 1500*ms, 1510*ms
	if vs := HoldsKept(append(base, retry)); len(vs) != 0 {
		t.Fatalf("retry after the session's ttl: %v", vs)
	}
}

func TestSessionsStayEnded(t *testing.T) {
	create := sop("1", 1, history.SessCreate, "S", 1000, 0, 10, history.OK)
	closeOK := sop("2", 1, history.SessClose, "S", 0, 100, 110, history.OK)
	cases := []struct {
		name string
		ops  []history.Op
		want string
	}{
		{"renew after close is refused", []history.Op{create, closeOK,
			sop("3", 1, history.SessRenew, "S", 1000, 200, 210, history.NoSession)}, ""},
		{"renew after close succeeds", []history.Op{create, closeOK,
			sop("3", 1, history.SessRenew, "S", 1000, 200, 210, history.OK)}, "h"},
		{"acquire with a session seen expired succeeds", []history.Op{create,
			sop("3", 1, history.SessRenew, "S", 1000, 1500, 1510, history.NoSession),
			inSession(op("4", 1, history.Acquire, "A", 0, 1600, 1610, history.OK, 9), "S")}, "h"},
		{"permit with a closed session", []history.Op{create, closeOK,
			inSession(permit(op("4", 1, history.Acquire, "A", 0, 200, 210, history.OK, 9), 1, 0), "S")}, "h"},
		{"close overlapping an acquire: either order", []history.Op{create,
			sop("2", 1, history.SessClose, "S", 0, 100, 150, history.OK),
			inSession(op("4", 1, history.Acquire, "A", 0, 90, 140, history.OK, 9), "S")}, ""},
		{"re-created after close", []history.Op{create, closeOK,
			sop("3", 1, history.SessCreate, "S", 1000, 200, 210, history.OK),
			sop("4", 1, history.SessRenew, "S", 1000, 300, 310, history.OK)}, ""},
		{"a create of unknown outcome may apply late", []history.Op{create, closeOK,
			sop("3", 1, history.SessCreate, "S", 1000, 50, 0, history.Unknown),
			sop("4", 1, history.SessRenew, "S", 1000, 300, 310, history.OK)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := props(Sessions(c.ops)); got != c.want {
				t.Fatalf("violations %q, want %q: %v", got, c.want, Sessions(c.ops))
			}
		})
	}
}

// Porcupine's model knows exclusive TTL leases only: locks taken shared or
// through a session, and semaphores, are left out of (e).
func TestLinearizableLeavesOutWhatItCannotModel(t *testing.T) {
	plain := op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5)
	rw := shared(op("2", 2, history.Acquire, "B", 1000, 0, 10, history.OK, 6))
	rw.Name = "rw"
	sl := inSession(op("3", 3, history.Acquire, "C", 0, 0, 10, history.OK, 7), "S")
	sl.Name = "sl"
	sem := permit(op("4", 4, history.Acquire, "D", 1000, 0, 10, history.OK, 8), 2, 0)
	reg := history.Op{ID: "6", Client: 4, Kind: history.FWrite, Name: "S#0", Token: 8, Outcome: history.OK}
	res := Linearizable([]history.Op{plain, rw, sl, sem, sop("5", 3, history.SessCreate, "S", 1000, 0, 5, history.OK), reg}, time.Second)
	if len(res) != 1 || res[0].Name != "L" {
		t.Fatalf("partitions %+v, want only L", res)
	}
}

func TestSemaphoreReads(t *testing.T) {
	read := func(limit int64, slots []int, tokens []uint64) history.Op {
		return history.Op{ID: "r", Kind: history.SemRead, Name: "S", Outcome: history.OK, GotLimit: limit, Slots: slots, Tokens: tokens}
	}
	for _, clean := range []history.Op{read(2, []int{0, 1}, []uint64{5, 7}), read(0, nil, nil), read(3, []int{2}, []uint64{9})} {
		if vs := SemaphoreReads([]history.Op{clean}); len(vs) != 0 {
			t.Errorf("clean %v: %v", clean.Slots, vs)
		}
	}
	for name, bad := range map[string]history.Op{
		"limit+1 holders":   read(2, []int{0, 1, 1}, []uint64{5, 7, 8}),
		"slot held twice":   read(3, []int{0, 0}, []uint64{5, 7}),
		"slot above limit":  read(2, []int{2}, []uint64{5}),
		"token held twice":  read(2, []int{0, 1}, []uint64{5, 5}),
		"holders, no limit": read(0, []int{0}, []uint64{5}),
	} {
		if vs := SemaphoreReads([]history.Op{bad}); len(vs) == 0 || vs[0].Property != "i" {
			t.Errorf("%s: not caught: %v", name, vs)
		}
	}
}
