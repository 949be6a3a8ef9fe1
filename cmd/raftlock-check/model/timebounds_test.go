package model

import (
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

const sec = int64(time.Second)

// op builds one journalled operation; times in milliseconds.
func tbOp(id string, kind, name, lease string, call, ret int64, out string) history.Op {
	return history.Op{ID: id, Client: 1, Kind: kind, Name: name, Lease: lease, Call: call * ms, Return: ret * ms, Outcome: out}
}

var tbParams = TimeParams{Tick: 250 * time.Millisecond, PerOutage: 250 * time.Millisecond, Slack: time.Second, Rate: 1, Wake: 2 * time.Second, WatchEnd: 1 << 62}

// abandoned: a lease of TTL 3 s granted (answered) at 1.0 s, never renewed
// or released, and a read sent at readAt showing it held.
func abandoned(readAt int64) []history.Op {
	acq := tbOp("a", history.Acquire, "ttl/0", "L", 990, 1000, history.OK)
	acq.TTLMs, acq.Token = 3000, 7
	rd := tbOp("r", history.Read, "ttl/0", "", readAt, readAt+5, history.OK)
	rd.Token = 7
	return []history.Op{acq, rd}
}

func TestLeaseEndBound(t *testing.T) {
	// Bound: 1.0 + 3.0 + slack 1.0 = 5.0 s.
	if r := TimeBounds(abandoned(4900), nil, nil, nil, tbParams); len(r.Lease) != 0 {
		t.Fatalf("held before its bound flagged: %v", r.Lease)
	}
	r := TimeBounds(abandoned(5100), nil, nil, nil, tbParams)
	if len(r.Lease) != 1 || r.Lease[0].Property != "l" || r.LeasesWitnessed != 1 {
		t.Fatalf("held after its bound: got %+v", r)
	}
	// An outage of 1.5 s during the lease moves the bound by 1.5 s + tick
	// + PerOutage: 7.0 s.
	outage := []Window{{From: 2 * sec, To: 3500 * ms, Change: true}}
	if r := TimeBounds(abandoned(6900), outage, nil, nil, tbParams); len(r.Lease) != 0 {
		t.Fatalf("outage not counted: %v", r.Lease)
	}
	if r := TimeBounds(abandoned(7100), outage, nil, nil, tbParams); len(r.Lease) != 1 {
		t.Fatalf("held past the extended bound not flagged: %+v", r)
	}
	// An outage that began after the lease's bound changes nothing.
	late := []Window{{From: 5500 * ms, To: 7 * sec, Change: true}}
	if r := TimeBounds(abandoned(7100), late, nil, nil, tbParams); len(r.Lease) != 1 {
		t.Fatalf("an outage after the bound extended it: %+v", r)
	}
	// A slow call near the bound (the cluster stalled) moves it out too.
	ops := abandoned(5500)
	slow := tbOp("s", history.Read, "jobs/0", "", 4000, 4800, history.Free)
	if r := TimeBounds(append(ops, slow), nil, nil, nil, tbParams); len(r.Lease) != 0 {
		t.Fatalf("a stall of 0.8 s not allowed for: %v", r.Lease)
	}
}

func TestLeaseEndBoundSkipsWhatItCannotProve(t *testing.T) {
	// A renew of unknown outcome may apply at any later time.
	ops := abandoned(9000)
	rn := tbOp("n", history.Renew, "ttl/0", "L", 2000, 0, history.Unknown)
	rn.Return = MaxTime
	if r := TimeBounds(append(ops, rn), nil, nil, nil, tbParams); len(r.Lease) != 0 || r.LeasesBounded != 0 {
		t.Fatalf("a lease with an unknown renew was judged: %+v", r)
	}
	// A restore between the grant and the read may have brought it back.
	if r := TimeBounds(abandoned(9000), nil, nil, []Restore{{Sent: 6 * sec, Answered: 7 * sec}}, tbParams); len(r.Lease) != 0 {
		t.Fatalf("a read across a restore was judged: %v", r.Lease)
	}
	// A read answered after the watcher stopped proves nothing.
	p := tbParams
	p.WatchEnd = 8 * sec
	if r := TimeBounds(abandoned(9000), nil, nil, nil, p); len(r.Lease) != 0 {
		t.Fatalf("a read after the watch ended was judged: %v", r.Lease)
	}
}

func TestSessionBound(t *testing.T) {
	cr := tbOp("c", history.SessCreate, "", "", 990, 1000, history.OK)
	cr.Session, cr.TTLMs = "S", 2000
	acq := tbOp("a", history.Acquire, "sttl/0", "L", 1000, 1010, history.OK)
	acq.Session, acq.Token = "S", 9
	held := func(at int64) history.Op {
		rd := tbOp("r", history.Read, "sttl/0", "", at, at+5, history.OK)
		rd.Token = 9
		return rd
	}
	// Bound: 1.0 + 2.0 + 1.0 = 4.0 s.
	if r := TimeBounds([]history.Op{cr, acq, held(3900)}, nil, nil, nil, tbParams); len(r.Session) != 0 {
		t.Fatalf("flagged before the session's bound: %v", r.Session)
	}
	r := TimeBounds([]history.Op{cr, acq, held(4100)}, nil, nil, nil, tbParams)
	if len(r.Session) != 1 || r.Session[0].Property != "n" || len(r.Lease) != 0 {
		t.Fatalf("a session's lease held past its bound: %+v", r)
	}
	// A renew of the session sent after its bound and answered OK: the
	// session outlived it.
	rn := tbOp("n", history.SessRenew, "", "", 4500, 4510, history.OK)
	rn.Session, rn.TTLMs = "S", 2000
	r = TimeBounds([]history.Op{cr, acq, rn}, nil, nil, nil, tbParams)
	if len(r.Session) != 1 || !strings.Contains(r.Session[0].Detail, "renewed") {
		t.Fatalf("a renew after the bound: %+v", r.Session)
	}
}

// handoff: a release answered at 2.0 s with a waiter parked since 1.0 s
// (wait 5 s) answered a grant at grantAt.
func handoff(grantAt int64) []history.Op {
	rel := tbOp("rel", history.Release, "ttl/0", "H", 1990, 2000, history.OK)
	w := tbOp("w", history.Acquire, "ttl/0", "W", 1000, grantAt, history.OK)
	w.WaitMs, w.Token = 5000, 11
	return []history.Op{w, rel}
}

func TestWakeUpBound(t *testing.T) {
	r := TimeBounds(handoff(2100), nil, nil, nil, tbParams)
	if len(r.Wake) != 0 || r.WakeJudged != 1 || len(r.WakeLatency) != 1 || r.WakeLatency[0] != 100*time.Millisecond {
		t.Fatalf("a prompt grant: %+v", r)
	}
	r = TimeBounds(handoff(4500), nil, nil, nil, tbParams)
	if len(r.Wake) != 1 || r.Wake[0].Property != "m" {
		t.Fatalf("a grant 2.5 s after the release: %+v", r)
	}
	// Not judged near a fault, nor when another acquire may have taken
	// the lock first.
	if r := TimeBounds(handoff(4500), nil, []Window{{From: 3 * sec, To: 3500 * ms}}, nil, tbParams); len(r.Wake) != 0 || r.WakeJudged != 0 {
		t.Fatalf("judged across a fault: %+v", r)
	}
	other := tbOp("o", history.Acquire, "ttl/0", "O", 2100, 2110, history.OK)
	if r := TimeBounds(append(handoff(4500), other), nil, nil, nil, tbParams); len(r.Wake) != 0 {
		t.Fatalf("judged though another lease took the lock: %v", r.Wake)
	}
	// A waiter whose wait ends before the bound is owed nothing.
	ops := handoff(4500)
	ops[0].WaitMs, ops[0].Outcome = 2500, history.Held
	if r := TimeBounds(ops, nil, nil, nil, tbParams); len(r.Wake) != 0 {
		t.Fatalf("a short wait judged: %v", r.Wake)
	}
}
