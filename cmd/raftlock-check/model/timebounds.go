package model

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// The time bounds (l), (m) and (n): properties of liveness in time, where
// (a)-(k) are all safety (a lease may always last longer). Each is judged
// only from what the checker can prove from its own history: send and
// answer times of its clients, the leader watcher's samples and the fault
// windows it injected (DESIGN.md, "Time bounds").

// Window is a span of CLOCK_MONOTONIC time: an injected fault, or an outage
// of leadership the watcher saw (Outage).
type Window struct {
	From, To int64
	// Change (an outage): leadership changed in it. An outage without one
	// is only the watcher not hearing from the leader in time.
	Change bool
}

func (w Window) overlaps(from, to int64) bool { return w.From <= to && from <= w.To }

// TimeParams are the allowances of the time bounds.
type TimeParams struct {
	// Tick is the server's TickInterval: how far the FSM clock may lag the
	// leader's when it loses leadership (it stamps at least that often
	// while deadlines run).
	Tick time.Duration
	// PerOutage is added for every outage besides its span and Tick: the
	// new leader's Barrier and first stamp after it first claims to lead,
	// and the old leader's last tick still in flight when it stopped.
	PerOutage time.Duration
	// Slack is added once: how late a correct leader may write and apply
	// the tick that ends a lease after its deadline (timer and scheduling
	// delay on a loaded machine, one commit).
	Slack time.Duration
	// Rate stretches every duration the FSM clock measures (TTLs, Tick):
	// 1 / the slowest node clock rate (--clock-faults), else 1.
	Rate float64
	// Wake bounds the waiter wake-up (m): from the answer of the release
	// that freed a lock to the grant's answer to a parked acquire.
	Wake time.Duration
	// WatchEnd: the watcher stopped then; later observations prove nothing
	// (an outage after it would be unseen).
	WatchEnd int64
}

// DefaultTimeParams are the allowances the checker judges by.
var DefaultTimeParams = TimeParams{Tick: 250 * time.Millisecond, PerOutage: 250 * time.Millisecond, Slack: time.Second, Rate: 1, Wake: 2 * time.Second}

// TimeReport is the verdict and figures of (l), (m) and (n).
type TimeReport struct {
	Lease, Wake, Session []Violation
	// Bounded: leases (sessions) with a bound; Witnessed: of them, those
	// whose name was observed after the bound (read or refusal sent then).
	LeasesBounded, LeasesWitnessed     int
	SessionsBounded, SessionsWitnessed int
	// Tightest is the least margin seen between a lease (or a session's
	// lease) observed held and its bound: its bound minus the send of the
	// last observation that showed it held. Set when any was seen held.
	Tightest      time.Duration
	TightestSet   bool
	TightestLease string
	// WakeJudged: releases with a waiter parked past the bound, no fault
	// near. WakeLatency: each quiet release's time to its first waiter's
	// grant (answer to answer).
	WakeJudged  int
	WakeLatency []time.Duration
	Outages     int
}

type boundedLease struct {
	ns, name, lease, session string
	tokens                   map[uint64]bool
	firstCall                int64
	base                     int64 // latest answer + TTL of its acquires and renews
	skip                     bool  // an acquire or renew of unknown outcome
	bound                    int64
	lastHeld                 int64 // send of the last observation showing it held (0: none)
	witnessed                bool
}

type boundedSession struct {
	firstCall, base, bound int64
	skip                   bool
	refresh                []history.Op // acknowledged creates and renews
}

func nsOf(kind string) string {
	switch kind {
	case history.SemAcquire, history.SemRenew, history.SemRead:
		return "sem"
	}
	return "lock"
}

// extend adds to base every outage that may have stopped the FSM clock
// before the lease could end: one that ended after the lease's first call
// (PerOutage later) and began before the bound reached so far; then Slack,
// and the worst stall the clients saw near the end.
func extend(base, firstCall int64, outages []Window, p TimeParams, st stalls) int64 {
	d := base
	for _, o := range outages {
		if o.To+int64(p.PerOutage) <= firstCall || o.From >= d {
			continue
		}
		d += (o.To - o.From) + int64(float64(p.Tick)*p.Rate) + int64(p.PerOutage)
	}
	d += int64(p.Slack)
	return d + st.worst(base-int64(time.Second), d)
}

// stalls are the latencies of the clients' definite calls to the cluster
// that do not wait (no wait_ms), by send time. A call that took long shows
// the cluster (or the machine) stalled then, and the tick that ends a lease
// may have been held up as long: a bound whose end falls near such a call
// is moved out by its latency. A server that ends leases late while
// answering promptly gains nothing from it.
type stalls []struct{ call, lat int64 }

func newStalls(ops []history.Op) stalls {
	var st stalls
	for _, o := range ops {
		switch o.Kind {
		case history.FRead, history.FWrite, history.URead, history.UWrite:
			continue // the checker's own register server
		}
		if o.WaitMs > 0 || !o.Definite() || o.Return == MaxTime {
			continue
		}
		st = append(st, struct{ call, lat int64 }{o.Call, o.Return - o.Call})
	}
	sort.Slice(st, func(i, j int) bool { return st[i].call < st[j].call })
	return st
}

// worst is the longest latency of a call sent in [from, to].
func (st stalls) worst(from, to int64) int64 {
	var w int64
	for i := sort.Search(len(st), func(i int) bool { return st[i].call >= from }); i < len(st) && st[i].call <= to; i++ {
		w = max(w, st[i].lat)
	}
	return w
}

// TimeBounds judges (l) lease end, (m) waiter wake-up and (n) session end.
// outages must be sorted by From; faults are the injected faults' windows.
func TimeBounds(ops []history.Op, outages, faults []Window, restores []Restore, p TimeParams) TimeReport {
	rep := TimeReport{Outages: len(outages)}
	st := newStalls(ops)
	sessions := map[string]*boundedSession{}
	leases := map[[3]string]*boundedLease{}
	ttl := func(ms int64) int64 { return int64(float64(ms) * float64(time.Millisecond) * p.Rate) }
	for _, o := range ops {
		switch o.Kind {
		case history.SessCreate, history.SessRenew:
			s := sessions[o.Session]
			if s == nil {
				s = &boundedSession{firstCall: o.Call}
				sessions[o.Session] = s
			}
			switch o.Outcome {
			case history.Unknown:
				s.skip = true
			case history.OK:
				s.base = max(s.base, o.Return+ttl(o.TTLMs))
				s.refresh = append(s.refresh, o)
			}
		case history.Acquire, history.Renew, history.SemAcquire, history.SemRenew:
			k := [3]string{nsOf(o.Kind), o.Name, o.Lease}
			l := leases[k]
			if l == nil {
				l = &boundedLease{ns: k[0], name: o.Name, lease: o.Lease, tokens: map[uint64]bool{}, firstCall: o.Call}
				leases[k] = l
			}
			if o.Session != "" {
				l.session = o.Session
			}
			switch o.Outcome {
			case history.Unknown:
				l.skip = true
			case history.OK:
				if o.Kind == history.Acquire || o.Kind == history.SemAcquire {
					l.tokens[o.Token] = true
				}
				l.base = max(l.base, o.Return+ttl(o.TTLMs))
			}
		}
	}
	for _, s := range sessions {
		if !s.skip && s.base > 0 {
			s.bound = extend(s.base, s.firstCall, outages, p, st)
			rep.SessionsBounded++
		}
	}
	// byToken finds the bounded lease a token observed on a name belongs to.
	byToken := map[[2]string]map[uint64]*boundedLease{}
	for _, l := range leases {
		if l.skip || len(l.tokens) == 0 {
			continue
		}
		if l.session != "" {
			s := sessions[l.session]
			if s == nil || s.bound == 0 {
				continue
			}
			l.bound = s.bound
		} else {
			l.bound = extend(l.base, l.firstCall, outages, p, st)
		}
		k := [2]string{l.ns, l.name}
		if byToken[k] == nil {
			byToken[k] = map[uint64]*boundedLease{}
		}
		for t := range l.tokens {
			byToken[k][t] = l
		}
	}
	// restored: a restore between the lease's first call and the
	// observation may have brought the lease back (DESIGN.md).
	restored := func(from, to int64) bool {
		for _, r := range restores {
			if r.Sent <= to && r.Answered >= from {
				return true
			}
		}
		return false
	}
	witnessedSessions := map[string]bool{}
	for _, o := range ops {
		if o.Return > p.WatchEnd || !o.Definite() {
			continue
		}
		if o.Kind == history.SessRenew && o.Outcome == history.OK {
			// The session lived when this renew applied: by the bound
			// of the creates and renews that may have applied before it.
			s := sessions[o.Session]
			if s == nil || s.skip || restored(s.firstCall, o.Return) {
				continue
			}
			var base int64
			for _, q := range s.refresh {
				if q.ID != o.ID && q.Call < o.Return {
					base = max(base, q.Return+ttl(q.TTLMs))
				}
			}
			if bound := extend(base, s.firstCall, outages, p, st); base > 0 && o.Call >= bound {
				rep.Session = append(rep.Session, Violation{"n", fmt.Sprintf("session %s renewed by a call sent %.3fs after its bound (%.3f): it outlived its TTL from its last acknowledged create or renew (%s)",
					o.Session, secs(o.Call-bound), secs(bound), o)})
			}
			continue
		}
		var seen []uint64
		switch {
		case o.Kind == history.Read && o.Outcome == history.OK:
			seen = append([]uint64{o.Token}, o.Tokens...)
		case o.Kind == history.SemRead && o.Outcome == history.OK:
			seen = o.Tokens
		case o.Kind == history.Acquire && o.Outcome == history.Held && o.Holder != 0:
			seen = []uint64{o.Holder}
		case o.Kind == history.Read && o.Outcome == history.Free:
		default:
			continue
		}
		ls := byToken[[2]string{nsOf(o.Kind), o.Name}]
		// Every bounded lease of the name whose bound this observation
		// follows is witnessed, whatever it showed.
		for _, l := range ls {
			if o.Call >= l.bound && !restored(l.firstCall, o.Return) {
				l.witnessed = true
				if l.session != "" {
					witnessedSessions[l.session] = true
				}
			}
		}
		for _, t := range seen {
			l := ls[t]
			if l == nil || restored(l.firstCall, o.Return) {
				continue
			}
			l.lastHeld = max(l.lastHeld, o.Call)
			if o.Call < l.bound {
				continue
			}
			what, prop := fmt.Sprintf("lease %s (token %d)", l.lease, t), "l"
			if l.session != "" {
				what, prop = fmt.Sprintf("lease %s (token %d) of session %s", l.lease, t, l.session), "n"
			}
			v := Violation{prop, fmt.Sprintf("%s %q: %s still held %.3fs after its bound (%.3f), seen by %s sent at %.3f",
				l.ns, l.name, what, secs(o.Call-l.bound), secs(l.bound), o, secs(o.Call))}
			if prop == "n" {
				rep.Session = append(rep.Session, v)
			} else {
				rep.Lease = append(rep.Lease, v)
			}
		}
	}
	for _, ls := range byToken {
		seen := map[*boundedLease]bool{}
		for _, l := range ls {
			if seen[l] {
				continue
			}
			seen[l] = true
			if l.session == "" {
				rep.LeasesBounded++
				if l.witnessed {
					rep.LeasesWitnessed++
				}
			}
			if l.lastHeld > 0 && l.session == "" {
				m := time.Duration(l.bound - l.lastHeld)
				if !rep.TightestSet || m < rep.Tightest {
					rep.Tightest, rep.TightestSet, rep.TightestLease = m, true, l.lease
				}
			}
		}
	}
	rep.SessionsWitnessed = len(witnessedSessions)
	sortViolations(rep.Lease)
	sortViolations(rep.Session)
	wakeUp(ops, outages, faults, p, st, &rep)
	return rep
}

func sortViolations(vs []Violation) {
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].Detail < vs[j].Detail })
}

// wakeUp is (m): on a lock only ever taken exclusively with a TTL, after a
// release R answered OK, a parked acquire W (sent before R, its wait still
// running at R's answer + Wake) must be answered a grant by R's answer +
// Wake, unless another acquire may have taken the lock first. Judged only
// when no fault window and no change of leader comes within a second of
// the span from R's send to the bound.
func wakeUp(ops []history.Op, outages, faults []Window, p TimeParams, st stalls, rep *TimeReport) {
	excluded := map[string]bool{}
	byName := map[string][]history.Op{}
	for _, o := range ops {
		switch o.Kind {
		case history.Acquire, history.Release:
			if o.Mode != "" || o.Session != "" {
				excluded[o.Name] = true
			}
			byName[o.Name] = append(byName[o.Name], o)
		}
	}
	quiet := func(from, to int64) bool {
		for _, w := range faults {
			if w.overlaps(from-int64(time.Second), to+int64(time.Second)) {
				return false
			}
		}
		for _, w := range outages {
			// A definite waiter was not dropped by a leader change while
			// parked (it would have been answered an unknown outcome), but
			// a new leader's queue starts empty: keep clear of changes.
			if w.Change && w.overlaps(from-int64(time.Second), to+int64(time.Second)) {
				return false
			}
		}
		return true
	}
	wake := int64(p.Wake)
	for name, os := range byName {
		if excluded[name] {
			continue
		}
		for _, r := range os {
			if r.Kind != history.Release || r.Outcome != history.OK || r.Return > p.WatchEnd {
				continue
			}
			due := r.Return + wake
			due += st.worst(r.Call, due) // a grant is one commit: held up by a stall too
			if !quiet(r.Call, due) {
				continue
			}
			// parked: waiters sent before the release, answered after it
			// (a grant) or after the bound (a refusal).
			var parked, owed []history.Op
			for _, a := range os {
				if a.Kind != history.Acquire || a.WaitMs <= 0 || a.Call >= r.Call || !a.Definite() {
					continue
				}
				if a.Outcome == history.OK && a.Return > r.Return || a.Outcome == history.Held && a.Return > due {
					parked = append(parked, a)
					// Its wait, started on the server after its send,
					// still ran at the bound: it is owed the lock by then.
					if a.Call+a.WaitMs*int64(time.Millisecond)*99/100 > due+int64(50*time.Millisecond) {
						owed = append(owed, a)
					}
				}
			}
			if len(parked) == 0 {
				continue
			}
			sort.Slice(parked, func(i, j int) bool { return parked[i].Return < parked[j].Return })
			first := parked[0]
			if first.Outcome == history.OK {
				rep.WakeLatency = append(rep.WakeLatency, time.Duration(first.Return-r.Return))
			}
			if len(owed) == 0 {
				continue
			}
			if first.Outcome == history.OK && first.Return <= due {
				rep.WakeJudged++
				continue
			}
			// Late: unless another acquire (not a parked one) may have
			// taken the lock between the release and the bound.
			taken := false
			for _, a := range os {
				if a.Kind == history.Acquire && !slices.ContainsFunc(parked, func(w history.Op) bool { return w.ID == a.ID }) &&
					(a.Outcome == history.OK || a.Outcome == history.Unknown) && a.Call < due && a.Return > r.Call {
					taken = true
				}
			}
			if taken {
				continue
			}
			rep.WakeJudged++
			w := owed[0]
			rep.Wake = append(rep.Wake, Violation{"m", fmt.Sprintf("lock %q freed by %s answered at %.3f, no fault near; %s parked since %.3f (wait %d ms) was answered %s only %.3fs after the release (bound %v)",
				name, r, secs(r.Return), w, secs(w.Call), w.WaitMs, w.Outcome, secs(w.Return-r.Return), p.Wake)})
		}
	}
	sortViolations(rep.Wake)
}
