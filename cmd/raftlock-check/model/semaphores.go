package model

import (
	"fmt"
	"sort"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// Permits is property (i)'s exclusion half: on one semaphore, at no instant
// are more than limit permits valid (validity as for leases, TTL or
// session), no two valid permits share a slot, and valid permits agree on
// the limit (a different limit is refused while anyone holds a permit).
// Valid means trusted by its client, which the server promises is held, so
// every overlap seen here was a real one.
func Permits(ops []history.Op, drift float64) []Violation {
	byName := map[string][]Interval{}
	for _, iv := range Validity(ops, drift) {
		if iv.Sem {
			byName[iv.Name] = append(byName[iv.Name], iv)
		}
	}
	var vs []Violation
	for _, name := range sortedKeys(byName) {
		sweep(byName[name], func(iv *Interval, active []*Interval) {
			limit := iv.Limit
			for _, a := range active {
				limit = min(limit, a.Limit)
				switch {
				case a.Slot == iv.Slot:
					vs = append(vs, Violation{"i", fmt.Sprintf("semaphore %q slot %d held by two permits at once for %v: c%d (token %d, lease %s, from %s) and c%d (token %d, lease %s, from %s) from t=%.3fs",
						name, iv.Slot, time.Duration(min(a.End, iv.End)-iv.Start), a.Client, a.Token, a.Lease, a.From, iv.Client, iv.Token, iv.Lease, iv.From, secs(iv.Start))})
				case a.Limit != iv.Limit:
					vs = append(vs, Violation{"i", fmt.Sprintf("semaphore %q held with limits %d and %d at once: c%d (lease %s, from %s) and c%d (lease %s, from %s) from t=%.3fs",
						name, a.Limit, iv.Limit, a.Client, a.Lease, a.From, iv.Client, iv.Lease, iv.From, secs(iv.Start))})
				}
			}
			if n := int64(len(active)) + 1; n > limit {
				vs = append(vs, Violation{"i", fmt.Sprintf("semaphore %q: %d permits valid at once at t=%.3fs, limit %d: the last granted to c%d (slot %d, token %d, lease %s, from %s)",
					name, n, secs(iv.Start), limit, iv.Client, iv.Slot, iv.Token, iv.Lease, iv.From)})
			}
		})
	}
	return vs
}

// SemaphoreReads is property (i) on the server's own state: a definite read
// of a semaphore shows at most limit holders, each in its own slot below
// the limit, each with its own token (or, nobody holding, limit 0 and no
// holders).
func SemaphoreReads(ops []history.Op) []Violation {
	var vs []Violation
	for _, o := range ops {
		if o.Kind != history.SemRead || o.Outcome != history.OK {
			continue
		}
		bad := func(why string) {
			vs = append(vs, Violation{"i", fmt.Sprintf("semaphore %q read %s (c%d, t=%.3fs) shows limit %d, slots %v, tokens %v: %s", o.Name, o.ID, o.Client, secs(o.Return), o.GotLimit, o.Slots, o.Tokens, why)})
		}
		if int64(len(o.Slots)) > o.GotLimit {
			bad("more holders than the limit")
		}
		slots, tokens := map[int]bool{}, map[uint64]bool{}
		for k, s := range o.Slots {
			if s < 0 || int64(s) >= o.GotLimit {
				bad(fmt.Sprintf("slot %d outside the limit", s))
			}
			if slots[s] {
				bad(fmt.Sprintf("slot %d held twice", s))
			}
			slots[s] = true
			if k < len(o.Tokens) {
				if tokens[o.Tokens[k]] {
					bad(fmt.Sprintf("token %d held twice", o.Tokens[k]))
				}
				tokens[o.Tokens[k]] = true
			}
		}
	}
	return vs
}

type permitGrant struct {
	lease     string
	slot      int
	token     uint64
	firstCall int64 // earliest send of a sem-acquire of this lease
	firstAck  int64 // earliest answer carrying this token
	op        string
}

// PermitTokens is property (i)'s token half: every acknowledged permit
// names the limit asked and a slot below it; on one semaphore a token
// belongs to one permit (lease and slot); and per (semaphore, slot) tokens
// rise in grant order: a grant acknowledged before another lease's first
// acquire of that slot was sent has the smaller token.
func PermitTokens(ops []history.Op) []Violation {
	var vs []Violation
	firstCall := map[string]int64{}
	for _, o := range ops {
		if o.Kind == history.SemAcquire {
			if c, ok := firstCall[o.Lease]; !ok || o.Call < c {
				firstCall[o.Lease] = o.Call
			}
		}
	}
	grants := map[string]map[uint64]*permitGrant{} // semaphore -> token -> grant
	for _, o := range ops {
		if o.Outcome != history.OK || (o.Kind != history.SemAcquire && o.Kind != history.SemRenew) {
			continue
		}
		if o.Kind == history.SemAcquire && o.GotLimit != o.Limit {
			vs = append(vs, Violation{"i", fmt.Sprintf("semaphore %q: %s asked limit %d, granted with limit %d", o.Name, o.ID, o.Limit, o.GotLimit)})
		}
		if o.Slot < 0 || (o.GotLimit > 0 && int64(o.Slot) >= o.GotLimit) {
			vs = append(vs, Violation{"i", fmt.Sprintf("semaphore %q: %s answered slot %d, outside 0..%d", o.Name, o.ID, o.Slot, o.GotLimit-1)})
		}
		if grants[o.Name] == nil {
			grants[o.Name] = map[uint64]*permitGrant{}
		}
		g, ok := grants[o.Name][o.Token]
		if !ok {
			grants[o.Name][o.Token] = &permitGrant{lease: o.Lease, slot: o.Slot, token: o.Token, firstCall: firstCall[o.Lease], firstAck: o.Return, op: o.ID}
			continue
		}
		if g.lease != o.Lease || g.slot != o.Slot {
			vs = append(vs, Violation{"i", fmt.Sprintf("semaphore %q: token %d granted twice: lease %s slot %d (%s) and lease %s slot %d (%s)", o.Name, o.Token, g.lease, g.slot, g.op, o.Lease, o.Slot, o.ID)})
		}
		g.firstAck = min(g.firstAck, o.Return)
	}
	for _, name := range sortedKeys(grants) {
		bySlot := map[int][]*permitGrant{}
		for _, g := range grants[name] {
			bySlot[g.slot] = append(bySlot[g.slot], g)
		}
		for slot, gs := range bySlot {
			byAck := append([]*permitGrant(nil), gs...)
			sort.Slice(byAck, func(i, j int) bool { return byAck[i].firstAck < byAck[j].firstAck })
			sort.Slice(gs, func(i, j int) bool { return gs[i].firstCall < gs[j].firstCall })
			var best *permitGrant
			next := 0
			for _, g := range gs {
				for next < len(byAck) && byAck[next].firstAck < g.firstCall {
					if best == nil || byAck[next].token > best.token {
						best = byAck[next]
					}
					next++
				}
				if best != nil && best != g && best.token >= g.token {
					vs = append(vs, Violation{"i", fmt.Sprintf("semaphore %q slot %d: token %d (%s, lease %s) was granted after token %d (%s, lease %s) was acknowledged",
						name, slot, g.token, g.op, g.lease, best.token, best.op, best.lease)})
				}
			}
		}
	}
	return vs
}

// HoldsKept checks that a permit, or a lease held through a session, keeps
// its token (and slot) over retried acquires and renews while it cannot
// have ended: an acknowledged retry sent inside the hold's validity (drift 0
// on ops whose TTLs are the earliest expiry) must answer the token and slot
// that started it. Broken, it is (i) for a permit and (h) for a session's
// lease; leases with TTLs of their own are (b)'s.
func HoldsKept(ops []history.Op) []Violation {
	byLease := map[string][]Interval{}
	for _, iv := range Validity(ops, 0) {
		if iv.Sem || iv.Session != "" {
			byLease[iv.Lease] = append(byLease[iv.Lease], iv)
		}
	}
	var vs []Violation
	for _, o := range ops {
		sem, r := holdRole(o.Kind)
		if o.Outcome != history.OK || (r != roleStart && r != roleRenew) {
			continue
		}
		for _, iv := range byLease[o.Lease] {
			if iv.Sem != sem || o.Call < iv.Start || o.Call >= iv.End || (o.Token == iv.Token && o.Slot == iv.Slot) {
				continue
			}
			prop, what := "h", fmt.Sprintf("lock %q (session %s)", o.Name, short(iv.Session))
			if sem {
				prop, what = "i", fmt.Sprintf("semaphore %q permit", o.Name)
			}
			vs = append(vs, Violation{prop, fmt.Sprintf("%s of lease %s changed token %d slot %d -> token %d slot %d while it must still hold (%s then %s)",
				what, o.Lease, iv.Token, iv.Slot, o.Token, o.Slot, iv.From, o.ID)})
		}
	}
	return vs
}
