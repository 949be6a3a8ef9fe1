package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/raftlock/raftlock/cmd/raftlock-check/faults"
	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
)

// only keeps the violations of one property.
func only(vs []model.Violation, id string) []model.Violation {
	var out []model.Violation
	for _, v := range vs {
		if v.Property == id {
			out = append(out, v)
		}
	}
	return out
}

// holdProps are the verdicts of the mixed cycles' properties: (h) sessions, (i)
// semaphores, (j) shared locks, on ops rewritten for (a) (opsA, judged with
// drift) and for (b)/(e) (opsE); extra holds the closing checks' findings.
// Each is NOT CHECKED when the run had none of its operations (--mix 0, or
// a server without them).
func holdProps(ops, opsA, opsE []history.Op, drift float64, extra []model.Violation, note string) []property {
	c := countHolds(ops)
	kept := model.HoldsKept(opsE)
	h := property{id: "h", name: "end once, and their holds with them",
		violations: concat(model.Sessions(opsE), only(kept, "h"), only(extra, "h"))}
	i := property{id: "i", name: "<= limit permits; slot tokens rise",
		violations: concat(model.Permits(opsA, drift), model.PermitTokens(opsE), model.SemaphoreReads(ops), only(kept, "i"), only(extra, "i"))}
	j := property{id: "j", name: "an exclusive hold excludes all others",
		violations: only(model.MutualExclusion(opsA, drift), "j")}
	for _, p := range []struct {
		prop *property
		n    int
		what string
	}{{&h, c.sessions, "no session was created"}, {&i, c.permits, "no permit was granted"}, {&j, c.shared, "no shared hold was granted"}} {
		if p.n == 0 {
			p.prop.notChecked, p.prop.note = true, p.what
		}
	}
	if note != "" {
		h.note = strings.TrimPrefix(h.note+"; "+note, "; ")
		i.note = strings.TrimPrefix(i.note+"; "+note, "; ")
	}
	return []property{h, i, j}
}

func concat(vss ...[]model.Violation) []model.Violation {
	var out []model.Violation
	for _, vs := range vss {
		out = append(out, vs...)
	}
	return out
}

// holdCounts says which mixed operations a run made and had acknowledged.
type holdCounts struct {
	sessions, sessionHolds, shared, permits int
}

func countHolds(ops []history.Op) holdCounts {
	var c holdCounts
	for _, o := range ops {
		if o.Outcome != history.OK {
			continue
		}
		switch {
		case o.Kind == history.SessCreate:
			c.sessions++
		case o.Kind == history.SemAcquire:
			c.permits++
			if o.Session != "" {
				c.sessionHolds++
			}
		case o.Kind == history.Acquire && o.Session != "":
			c.sessionHolds++
			if o.Mode == history.Shared {
				c.shared++
			}
		case o.Kind == history.Acquire && o.Mode == history.Shared:
			c.shared++
		}
	}
	return c
}

// printHoldFigures shows how hard the mixed cycles pressed on their
// boundaries.
func printHoldFigures(w io.Writer, ops []history.Op, drift float64, fs []faults.Fault) {
	c := countHolds(ops)
	if c.sessions+c.permits+c.shared == 0 {
		return
	}
	closedOK, seenEnded, parkedAtClose := 0, 0, 0
	closes := map[string]history.Op{}
	for _, o := range ops {
		switch {
		case o.Kind == history.SessClose && o.Outcome == history.OK:
			closedOK++
			closes[o.Session] = o
		case o.Session != "" && o.Outcome == history.NoSession:
			seenEnded++
		}
	}
	for _, o := range ops {
		if cl, ok := closes[o.Session]; ok && o.WaitMs > 0 && (o.Kind == history.Acquire || o.Kind == history.SemAcquire) && o.Call < cl.Call && o.Return > cl.Call {
			parkedAtClose++
		}
	}
	// Sessions whose TTL ran out while their client was stopped (a holder
	// pause): the session's last trusted instant falls inside the pause.
	outInPause := 0
	for id, spans := range model.SessionValidity(ops, 0) {
		if len(spans) == 0 {
			continue
		}
		last := spans[len(spans)-1]
		if _, closed := closes[id]; closed {
			continue
		}
		for _, f := range fs {
			if f.Kind == faults.HolderPause && f.Target == fmt.Sprintf("c%d", last.Client) && f.Start <= last.End && last.End <= f.End {
				outInPause++
			}
		}
	}
	fmt.Fprintf(w, "sessions: %d created, %d closed, %d calls answered no_session, %d ran out during a holder pause; %d locks and permits acquired in sessions; %d acquires parked while their session was closed\n",
		c.sessions, closedOK, seenEnded, outInPause, c.sessionHolds, parkedAtClose)
	byOut := func(kind string, pred func(history.Op) bool) string {
		n := map[string]int{}
		for _, o := range ops {
			if o.Kind == kind && pred(o) {
				n[o.Outcome]++
			}
		}
		var parts []string
		for k, v := range n {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(parts)
		return strings.Join(parts, ", ")
	}
	fmt.Fprintf(w, "shared acquires: %s; exclusive acquires of rw locks: %s\n",
		byOut(history.Acquire, func(o history.Op) bool { return o.Mode == history.Shared }),
		byOut(history.Acquire, func(o history.Op) bool { return o.Mode == "" && strings.Contains(o.Name, "rw/") }))
	// The most holds valid at once shows whether the limits were reached.
	most := map[string]int{}
	for _, group := range [][]model.Interval{holdsBy(ops, drift, true), holdsBy(ops, drift, false)} {
		for _, iv := range group {
			key, n := iv.Name, 0
			if iv.Sem {
				key = "semaphore " + key
			} else {
				key = "shared " + key
			}
			for _, o := range group {
				if o.Name == iv.Name && o.Start <= iv.Start && iv.Start < o.End {
					n++
				}
			}
			most[key] = max(most[key], n)
		}
	}
	var parts []string
	for k, v := range most {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	fmt.Fprintf(w, "most valid at once: %s\n", strings.Join(parts, ", "))
}

// holdsBy returns the valid permits (sem) or the valid shared lock holds.
func holdsBy(ops []history.Op, drift float64, sem bool) []model.Interval {
	var out []model.Interval
	for _, iv := range model.Validity(ops, drift) {
		if iv.Sem == sem && (sem || iv.Mode == history.Shared) {
			out = append(out, iv)
		}
	}
	return out
}
