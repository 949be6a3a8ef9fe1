package model

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// Violation is one broken property, with enough detail to find it in the
// journal.
type Violation struct {
	Property string // "a" … "n" (PropertyName)
	Detail   string
}

// propertyNames are the short names said beside the properties' letters in
// the report and the docs ("(a) mutual exclusion"). The letters stay the
// properties' ids: violations, seeded tests and scripts match on them.
var propertyNames = map[string]string{
	"a": "mutual exclusion",
	"b": "fencing tokens",
	"c": "fenced register",
	"d": "final state",
	"e": "linearizability",
	"f": "index order",
	"g": "replica agreement",
	"h": "sessions",
	"i": "semaphores",
	"j": "shared locks",
	"k": "restore fencing",
	"l": "lease end",
	"m": "waiter wake-up",
	"n": "session end",
}

// PropertyName is the short name of property id ("a" … "n"), "" for
// another id.
func PropertyName(id string) string { return propertyNames[id] }

func (v Violation) String() string { return fmt.Sprintf("(%s) %s", v.Property, v.Detail) }

// Interval is a span during which a client rightly believed it held a lock
// (or a semaphore permit, or a session).
type Interval struct {
	Name, Lease string
	Client      int
	Start, End  int64  // CLOCK_MONOTONIC ns
	From        string // op id that started it
	Sem         bool   // a semaphore permit (Name is the semaphore's)
	Mode        string // history.Shared for a shared lock hold
	Session     string // the session it lives by, if any
	Token       uint64 // token answered by the op that started it
	Slot        int    // permit: slot answered
	Limit       int64  // permit: the semaphore's limit
}

type grant struct {
	name, lease string
	token       uint64
	firstCall   int64 // earliest send of an acquire of this lease
	firstAck    int64 // earliest answer carrying this token
	op          string
}

// Tokens is property (b): tokens are unique to one grant, strictly increase
// on each lock in grant order (a grant acknowledged before another's first
// acquire was sent has the smaller token), and a lease keeps its token over
// retried acquires and renewals answered while it cannot have expired.
func Tokens(ops []history.Op) []Violation {
	var vs []Violation
	firstCall := map[string]int64{}
	for _, o := range ops {
		if o.Kind == history.Acquire {
			if c, ok := firstCall[o.Lease]; !ok || o.Call < c {
				firstCall[o.Lease] = o.Call
			}
		}
	}
	grants := map[uint64]*grant{}
	lastOK := map[string]history.Op{}
	for _, o := range ops { // sorted by call
		if o.Outcome != history.OK || (o.Kind != history.Acquire && o.Kind != history.Renew) {
			continue
		}
		// A retry sent while the lease must hold may still be applied after
		// it ended (a paused leader, an election): then the server rightly
		// grants afresh. Only a retry answered before the lease can have
		// ended must show the same token.
		if prev, ok := lastOK[o.Lease]; ok && o.Return < prev.Call+prev.TTLMs*int64(time.Millisecond) && o.Token != prev.Token {
			released := false
			for _, rel := range ops {
				if rel.Kind == history.Release && rel.Lease == o.Lease && rel.Call > prev.Call && rel.Call < o.Return {
					released = true
				}
			}
			if !released {
				vs = append(vs, Violation{"b", fmt.Sprintf("lease %s on %q changed token %d -> %d while still held (%s then %s)", o.Lease, o.Name, prev.Token, o.Token, prev.ID, o.ID)})
			}
		}
		lastOK[o.Lease] = o
		g, ok := grants[o.Token]
		if !ok {
			grants[o.Token] = &grant{name: o.Name, lease: o.Lease, token: o.Token, firstCall: firstCall[o.Lease], firstAck: o.Return, op: o.ID}
			continue
		}
		if g.lease != o.Lease || g.name != o.Name {
			vs = append(vs, Violation{"b", fmt.Sprintf("token %d granted twice: lease %s on %q (%s) and lease %s on %q (%s)", o.Token, g.lease, g.name, g.op, o.Lease, o.Name, o.ID)})
		}
		g.firstAck = min(g.firstAck, o.Return)
	}
	byName := map[string][]*grant{}
	for _, g := range grants {
		byName[g.name] = append(byName[g.name], g)
	}
	for name, gs := range byName {
		byAck := append([]*grant(nil), gs...)
		sort.Slice(byAck, func(i, j int) bool { return byAck[i].firstAck < byAck[j].firstAck })
		sort.Slice(gs, func(i, j int) bool { return gs[i].firstCall < gs[j].firstCall })
		var best *grant // highest token among grants acknowledged so far
		nextAck := 0    // byAck[:nextAck] were acknowledged before g was first sent
		for _, g := range gs {
			for nextAck < len(byAck) && byAck[nextAck].firstAck < g.firstCall {
				if best == nil || byAck[nextAck].token > best.token {
					best = byAck[nextAck]
				}
				nextAck++
			}
			if best != nil && best.token >= g.token && best != g {
				vs = append(vs, Violation{"b", fmt.Sprintf("lock %q: token %d (%s, lease %s) was granted after token %d (%s, lease %s) was acknowledged", name, g.token, g.op, g.lease, best.token, best.op, best.lease)})
			}
		}
	}
	return vs
}

// RegisterReport is property (c)'s findings.
type RegisterReport struct {
	FencedAccepted, FencedRejected int
	FencedRepeats                  int // second writes under one token, refused as the shipped guard must
	UnfencedWrites, UnfencedLost   int
	Violations                     []Violation
}

// Registers is property (c): the fenced register never accepted a token
// below one it had accepted and lost no acknowledged write, every write the
// clients saw acknowledged is in its log, and the unfenced register did
// lose writes (otherwise the faults were too weak to show anything). A run
// whose cycles write no register at all (time probes of hand-offs and
// sessions alone) has nothing to lose.
func Registers(log []history.Access, ops []history.Op) RegisterReport {
	r := RegisterSafety(log, ops)
	if r.UnfencedLost == 0 && r.UnfencedWrites > 0 {
		r.Violations = append(r.Violations, Violation{"c", fmt.Sprintf("the unfenced register lost no write in %d writes: the faults were too weak to show what fencing prevents", r.UnfencedWrites)})
	}
	return r
}

// RegisterSafety is the safety half of property (c): the fenced register
// never accepted a token below one it had accepted, lost no acknowledged
// write, and holds every write the clients saw acknowledged. It does not ask
// that the unfenced register lost writes, so it suits runs whose faults are
// not chosen to provoke that (the workload against an external cluster).
func RegisterSafety(log []history.Access, ops []history.Op) RegisterReport {
	var r RegisterReport
	maxTok := map[string]uint64{}
	// The shipped guard accepts each token once per resource: reads and
	// writes each strictly increase (a grant reads once, then writes once).
	lastAccepted := map[[2]any]uint64{} // by {name, write}
	accepted := map[string]history.Access{}
	lost := map[string]bool{}
	for _, a := range log {
		if !a.Fenced {
			if a.Write && a.Accepted {
				r.UnfencedWrites++
				r.UnfencedLost += len(a.Lost)
			}
			continue
		}
		if !a.Accepted {
			switch {
			case a.Write && a.Again:
				r.FencedRepeats++
			case a.Write:
				r.FencedRejected++
			}
			continue
		}
		if a.Write {
			r.FencedAccepted++
			accepted[a.OpID] = a
		}
		if a.Token < maxTok[a.Name] {
			r.Violations = append(r.Violations, Violation{"c", fmt.Sprintf("fenced register %q accepted token %d (%s) after token %d", a.Name, a.Token, a.OpID, maxTok[a.Name])})
		}
		maxTok[a.Name] = max(maxTok[a.Name], a.Token)
		key := [2]any{a.Name, a.Write}
		if prev, ok := lastAccepted[key]; ok && a.Token <= prev {
			r.Violations = append(r.Violations, Violation{"c", fmt.Sprintf("fenced register %q accepted token %d (%s, write=%v) though it had accepted token %d: the guard accepts a token once", a.Name, a.Token, a.OpID, a.Write, prev)})
		}
		lastAccepted[key] = a.Token
		for _, l := range a.Lost {
			lost[l] = true
			r.Violations = append(r.Violations, Violation{"c", fmt.Sprintf("fenced register %q lost write %s: overwritten by %s (token %d) which had not read it", a.Name, l, a.OpID, a.Token)})
		}
	}
	for _, o := range ops {
		if o.Kind == history.FWrite && o.Outcome == history.OK {
			if _, ok := accepted[o.ID]; !ok {
				r.Violations = append(r.Violations, Violation{"c", fmt.Sprintf("acknowledged fenced write %s is not in the register's log", o.ID)})
			}
		}
	}
	return r
}

// LockView is one held lock as a node reports it.
type LockView struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Token uint64 `json:"fencing_token"`
	TTLMs int64  `json:"ttl_ms"`
}

// NodeState is one node's final state, read with ?stale=true.
type NodeState struct {
	ID      string
	Applied uint64
	Locks   []LockView
	Err     string
}

// Expect is what the final, acknowledged operations left on one lock.
type Expect struct {
	Name  string
	Held  bool
	Owner string
	Token uint64
	TTLMs int64
}

// FinalState is property (d): every node ends with the same locks, its log
// holds every acknowledged grant (its applied index is at least the largest
// acknowledged token), and the acknowledged closing acquires, renews and
// releases are all in its state.
func FinalState(nodes []NodeState, expect []Expect, ops []history.Op) []Violation {
	var vs []Violation
	var maxTok uint64
	for _, o := range ops {
		if _, r := holdRole(o.Kind); o.Outcome == history.OK && (r == roleStart || r == roleRenew) {
			maxTok = max(maxTok, o.Token)
		}
	}
	var ref *NodeState
	for i := range nodes {
		n := &nodes[i]
		if n.Err != "" {
			vs = append(vs, Violation{"d", fmt.Sprintf("node %s: final state unreadable: %s", n.ID, n.Err)})
			continue
		}
		if n.Applied < maxTok {
			vs = append(vs, Violation{"d", fmt.Sprintf("node %s applied only up to %d, but token %d was acknowledged", n.ID, n.Applied, maxTok)})
		}
		got := map[string]LockView{}
		for _, l := range n.Locks {
			got[l.Name] = l
		}
		for _, e := range expect {
			l, held := got[e.Name]
			switch {
			case held != e.Held:
				vs = append(vs, Violation{"d", fmt.Sprintf("node %s: lock %q held=%v, but the acknowledged final operations leave held=%v", n.ID, e.Name, held, e.Held)})
			case held && (l.Token != e.Token || l.Owner != e.Owner || l.TTLMs != e.TTLMs):
				vs = append(vs, Violation{"d", fmt.Sprintf("node %s: lock %q is %+v, want owner %s token %d ttl %d ms (acknowledged acquire and renew)", n.ID, e.Name, l, e.Owner, e.Token, e.TTLMs)})
			}
		}
		if ref == nil {
			ref = n
			continue
		}
		if fmt.Sprint(ref.Locks) != fmt.Sprint(n.Locks) {
			vs = append(vs, Violation{"d", fmt.Sprintf("nodes disagree: %s has %v, %s has %v", ref.ID, ref.Locks, n.ID, n.Locks)})
		}
	}
	return vs
}

// MaxTime is the return time of an operation that never returned.
const MaxTime = math.MaxInt64

// secs shows a CLOCK_MONOTONIC reading in seconds, as the journal has it.
func secs(t int64) float64 { return float64(t) / 1e9 }

// IndexOrder is property (f): a lock's index never goes backwards. Reads
// (plain and blocking) are linearizable, so a read sent after another read
// of the same lock returned must answer an index at least as high. Only
// definite reads count (ok, free); each carries the index it was answered.
func IndexOrder(ops []history.Op) []Violation {
	byName := map[string][]history.Op{}
	for _, o := range ops {
		if o.Kind == history.Read && (o.Outcome == history.OK || o.Outcome == history.Free) && o.Return != MaxTime {
			byName[o.Name] = append(byName[o.Name], o)
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var vs []Violation
	for _, name := range names {
		reads := byName[name]
		byCall := append([]history.Op(nil), reads...)
		sort.Slice(byCall, func(i, j int) bool { return byCall[i].Call < byCall[j].Call })
		byRet := reads
		sort.Slice(byRet, func(i, j int) bool { return byRet[i].Return < byRet[j].Return })
		var best *history.Op // highest index among reads returned so far
		next := 0
		for _, o := range byCall {
			for next < len(byRet) && byRet[next].Return < o.Call {
				if best == nil || byRet[next].Index > best.Index {
					best = &byRet[next]
				}
				next++
			}
			if best != nil && o.Index < best.Index {
				vs = append(vs, Violation{"f", fmt.Sprintf("lock %q: read %s (c%d, sent t=%.3fs) answered index %d, below index %d answered by read %s (c%d) that returned at t=%.3fs",
					name, o.ID, o.Client, secs(o.Call), o.Index, best.Index, best.ID, best.Client, secs(best.Return))})
			}
		}
	}
	return vs
}
