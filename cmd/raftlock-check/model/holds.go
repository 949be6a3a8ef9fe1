package model

import (
	"fmt"
	"sort"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// role is what an op does to the hold (lease or permit) it names.
type role int

const (
	roleNone  role = iota
	roleStart      // acquire: grants, or repeats the grant of a holding lease
	roleRenew
	roleEnd // release: the client stops trusting the hold when it sends it
)

// holdRole says whether an op acts on a semaphore permit (else a lock
// lease) and how.
func holdRole(kind string) (sem bool, r role) {
	switch kind {
	case history.Acquire:
		return false, roleStart
	case history.Renew:
		return false, roleRenew
	case history.Release:
		return false, roleEnd
	case history.SemAcquire:
		return true, roleStart
	case history.SemRenew:
		return true, roleRenew
	case history.SemRelease:
		return true, roleEnd
	}
	return false, roleNone
}

// trustedUntil is how long an acknowledged op lets its client trust what it
// holds: send + ttl × (1 − drift).
func trustedUntil(o history.Op, drift float64) int64 {
	return o.Call + int64(float64(o.TTLMs)*float64(time.Millisecond)*(1-drift))
}

// SessionValidity computes, per session id, the spans during which its
// client could trust the session, by the lease rule: from the answer of an
// acknowledged create (or of a renew sent after the previous deadline) to
// send + ttl×(1−drift) of its last acknowledged create or renew, cut at the
// send of a close (whatever its outcome).
//
// A create always starts a new span, even one sent before the deadline: a
// create with the session's id re-creates a session that has ended in the
// meantime (its leases gone), while a renew of an ended session fails. So
// only a renew proves the session, and its leases, lived on.
func SessionValidity(ops []history.Op, drift float64) map[string][]Interval {
	bySess := map[string][]history.Op{}
	for _, o := range ops {
		switch o.Kind {
		case history.SessCreate, history.SessRenew, history.SessClose:
			if o.Session != "" {
				bySess[o.Session] = append(bySess[o.Session], o)
			}
		}
	}
	out := map[string][]Interval{}
	for id, sops := range bySess {
		sort.Slice(sops, func(i, j int) bool { return sops[i].Call < sops[j].Call })
		var open *Interval
		flush := func() {
			if open != nil && open.End > open.Start {
				out[id] = append(out[id], *open)
			}
			open = nil
		}
		for _, o := range sops {
			switch {
			case o.Kind == history.SessClose:
				if open != nil {
					open.End = min(open.End, o.Call)
				}
				flush()
			case o.Outcome != history.OK:
			case o.Kind == history.SessRenew && open != nil && o.Call < open.End:
				open.End = max(open.End, trustedUntil(o, drift))
			default:
				flush()
				open = &Interval{Lease: id, Session: id, Client: o.Client, Start: o.Return, End: trustedUntil(o, drift), From: o.ID}
			}
		}
		flush()
	}
	return out
}

// sessionSpan returns the index of the session span holding instant t
// (the one ending first when spans overlap, which only a re-create makes)
// and its end; -1 when the session cannot be trusted at t.
func sessionSpan(spans []Interval, t int64) (int, int64) {
	best, end := -1, int64(0)
	for i, s := range spans {
		if s.Start <= t && t < s.End && (best < 0 || s.End < end) {
			best, end = i, s.End
		}
	}
	return best, end
}

// Validity computes, per lease and per semaphore permit, when its client
// could trust it: from the answer of an acknowledged acquire (or of a renew
// sent after the previous deadline) to send + ttl×(1−drift) of its last
// acknowledged acquire or renew, cut short by the send of a release.
//
// A lease or permit acquired with a session has no deadline of its own: an
// acknowledged acquire answered while the session could be trusted is
// trusted to the end of that session span (SessionValidity), and to no
// later span: the client cannot know the session lived on. Answered outside
// any span, it is trusted not at all.
func Validity(ops []history.Op, drift float64) []Interval {
	sessions := SessionValidity(ops, drift)
	byLease := map[string][]history.Op{}
	for _, o := range ops {
		if sem, r := holdRole(o.Kind); r != roleNone && o.Lease != "" {
			k := "L" + o.Lease
			if sem {
				k = "S" + o.Lease
			}
			byLease[k] = append(byLease[k], o)
		}
	}
	var out []Interval
	for _, leaseOps := range byLease {
		sort.Slice(leaseOps, func(i, j int) bool { return leaseOps[i].Call < leaseOps[j].Call })
		var open *Interval // the interval still open: the lease's next ops may extend it
		openSpan := -1     // the session span it lives in, for a session's lease
		flush := func() {
			if open != nil && open.End > open.Start {
				out = append(out, *open)
			}
			open = nil
		}
		for _, o := range leaseOps {
			sem, r := holdRole(o.Kind)
			if r == roleEnd {
				if open != nil {
					open.End = min(open.End, o.Call)
				}
				flush()
				continue
			}
			if o.Outcome != history.OK {
				continue
			}
			until, span := trustedUntil(o, drift), -1
			if o.Session != "" {
				span, until = sessionSpan(sessions[o.Session], o.Return)
				if span < 0 {
					until = o.Return
				}
			}
			if open != nil && o.Call < open.End && span == openSpan {
				open.End = max(open.End, until)
				continue
			}
			flush()
			open = &Interval{Name: o.Name, Lease: o.Lease, Client: o.Client, Start: o.Return, End: until, From: o.ID,
				Sem: sem, Mode: o.Mode, Session: o.Session, Token: o.Token, Slot: o.Slot, Limit: o.GotLimit}
			if open.Limit == 0 {
				open.Limit = o.Limit
			}
			openSpan = span
		}
		flush()
	}
	return out
}

// exclusionProp names the property an overlap of two lock holds breaks:
// (a) between exclusive holds, (j) when a shared hold is involved.
func exclusionProp(a, b *Interval) string {
	if a.Mode == history.Shared || b.Mode == history.Shared {
		return "j"
	}
	return "a"
}

// sweep visits each interval in start order with the intervals of the same
// group still open at its start.
func sweep(ivs []Interval, visit func(iv *Interval, active []*Interval)) {
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].Start < ivs[j].Start })
	var active []*Interval
	for i := range ivs {
		iv := &ivs[i]
		kept := active[:0]
		for _, a := range active {
			if a.End > iv.Start {
				kept = append(kept, a)
			}
		}
		active = kept
		visit(iv, active)
		active = append(active, iv)
	}
}

// MutualExclusion is properties (a) and (j): on one lock, an exclusive
// hold's validity interval overlaps no other lease's, whether held with a
// TTL or through a session; shared holds may overlap each other.
func MutualExclusion(ops []history.Op, drift float64) []Violation {
	byName := map[string][]Interval{}
	for _, iv := range Validity(ops, drift) {
		if !iv.Sem {
			byName[iv.Name] = append(byName[iv.Name], iv)
		}
	}
	var vs []Violation
	for _, name := range sortedKeys(byName) {
		sweep(byName[name], func(iv *Interval, active []*Interval) {
			for _, a := range active {
				if a.Lease == iv.Lease || (a.Mode == history.Shared && iv.Mode == history.Shared) {
					continue
				}
				vs = append(vs, Violation{exclusionProp(a, iv), fmt.Sprintf("lock %q held by two clients at once for %v: c%d (%s, lease %s, from %s) until t=%.3fs and c%d (%s, lease %s, from %s) from t=%.3fs",
					name, time.Duration(min(a.End, iv.End)-iv.Start), a.Client, a.describe(), a.Lease, a.From, secs(a.End), iv.Client, iv.describe(), iv.Lease, iv.From, secs(iv.Start))})
			}
		})
	}
	return vs
}

// describe names a hold's mode and how it lives.
func (iv *Interval) describe() string {
	m := "exclusive"
	if iv.Mode == history.Shared {
		m = "shared"
	}
	if iv.Sem {
		m = fmt.Sprintf("slot %d of %d", iv.Slot, iv.Limit)
	}
	if iv.Session != "" {
		return m + ", session " + short(iv.Session)
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
