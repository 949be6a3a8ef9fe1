// Package model holds the checker's properties: the porcupine lease-lock model
// (e) and the direct checks of mutual exclusion (a), fencing tokens (b), the
// registers (c) and the final state (d). Each works on a merged history, so
// each can be tested on hand-made histories.
package model

import (
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// state is one lock's state in the sequential specification. It is a
// comparable value; the model is nondeterministic (expiry may or may not
// have happened, an unknown outcome may or may not have taken effect), so a
// step returns every possible next state.
type state struct {
	Holder string // lease id holding the lock, "" when free
	Token  uint64 // the holder's fencing token; 0 when its grant's answer was lost
	E      int64  // earliest time the holder's lease may be gone: send + ttl
	Max    uint64 // highest token known granted on this lock
	// Low is the earliest real time the next operation can take effect at:
	// the linearization points chosen so far, raised to E where an expiry
	// was observed. Keeping it in the state makes one-sided expiry exact.
	Low int64
}

// input is what porcupine sees of an operation.
type input struct {
	Kind  string
	Lease string
	TTL   int64 // ns
	Call  int64
	Ret   int64 // MaxInt64 for unknown outcomes
}

type output struct {
	Outcome string
	Token   uint64 // ok: granted/renewed/read token; held: holder token
}

// at returns the linearization point of an op in state s, or false when the
// op cannot take effect after s.Low and at or after min.
func at(s state, in input, min int64) (int64, bool) {
	p := max(s.Low, in.Call, min)
	return p, p <= in.Ret
}

// reveal checks a token reported for the current holder against the state,
// learning it if the holder's grant answer was lost.
func reveal(s state, tok uint64) (state, bool) {
	if s.Token == 0 {
		if tok <= s.Max {
			return s, false
		}
		s.Token, s.Max = tok, tok
		return s, true
	}
	return s, s.Token == tok
}

// step is the sequential specification of one lock, with one-sided expiry.
func step(s state, in input, out output) []state {
	var next []state
	// move appends s advanced to point p (if p is a possible point).
	move := func(s state, min int64) (state, bool) {
		p, ok := at(s, in, min)
		s.Low = p
		return s, ok
	}
	// expired: the holder's lease is gone, which may be observed only at or
	// after its E.
	expired := func(s state) (state, bool) {
		s, ok := move(s, s.E)
		s.Holder, s.Token, s.E = "", 0, 0
		return s, ok
	}
	add := func(s state, ok bool) {
		if ok {
			next = append(next, s)
		}
	}
	grant := func(s state, tok uint64) (state, bool) {
		ok := true
		if s.Holder != "" { // a lease's own re-acquire after expiry is a new grant too
			s, ok = expired(s)
		} else {
			s, ok = move(s, 0)
		}
		if tok != 0 {
			if tok <= s.Max {
				return s, false
			}
			s.Max = tok
		}
		s.Holder, s.Token, s.E = in.Lease, tok, in.Call+in.TTL
		return s, ok
	}
	switch in.Kind {
	case history.Acquire:
		switch out.Outcome {
		case history.OK:
			if s.Holder == in.Lease { // idempotent retry: same token, deadline pushed
				t, ok := reveal(s, out.Token)
				t, ok2 := move(t, 0)
				t.E = max(t.E, in.Call+in.TTL)
				add(t, ok && ok2)
			}
			add(grant(s, out.Token))
		case history.Held:
			if out.Token == 0 && s.Holder != in.Lease {
				// Refused with no holder named: the lock is promised to a
				// parked waiter whose grant has not applied (an acquire
				// never jumps the queue), so it may be free here.
				add(move(s, 0))
			} else if s.Holder != "" && s.Holder != in.Lease {
				t, ok := reveal(s, out.Token)
				t, ok2 := move(t, 0)
				add(t, ok && ok2)
			}
		case history.Unknown:
			add(s, true)
			if s.Holder == in.Lease {
				t, ok := move(s, 0)
				t.E = max(t.E, in.Call+in.TTL)
				add(t, ok)
			} else {
				add(grant(s, 0))
			}
		}
	case history.Renew:
		switch out.Outcome {
		case history.OK:
			if s.Holder == in.Lease {
				t, ok := reveal(s, out.Token)
				t, ok2 := move(t, 0)
				t.E = max(t.E, in.Call+in.TTL)
				add(t, ok && ok2)
			}
		case history.NotHolder:
			if s.Holder != in.Lease {
				add(move(s, 0))
			} else {
				add(expired(s))
			}
		case history.Unknown:
			add(s, true)
			if s.Holder == in.Lease {
				t, ok := move(s, 0)
				t.E = max(t.E, in.Call+in.TTL)
				add(t, ok)
			}
		}
	case history.Release:
		free := func(s state) (state, bool) {
			s, ok := move(s, 0)
			s.Holder, s.Token, s.E = "", 0, 0
			return s, ok
		}
		switch out.Outcome {
		case history.OK:
			if s.Holder == in.Lease {
				add(free(s))
			}
		case history.NotHolder:
			if s.Holder != in.Lease {
				add(move(s, 0))
			} else {
				add(expired(s))
			}
		case history.Unknown:
			add(s, true)
			if s.Holder == in.Lease {
				add(free(s))
			}
		}
	case history.Read:
		switch out.Outcome {
		case history.OK:
			if s.Holder != "" {
				t, ok := reveal(s, out.Token)
				t, ok2 := move(t, 0)
				add(t, ok && ok2)
			}
		case history.Free:
			if s.Holder == "" {
				add(move(s, 0))
			} else {
				add(expired(s))
			}
		}
	}
	return next
}

func hashState(v any) uint64 {
	s := v.(state)
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%d|%d|%d|%d", s.Holder, s.Token, s.E, s.Max, s.Low)
	return h.Sum64()
}

// Model is the porcupine lease-lock model. Operations are partitioned by
// lock name before checking (see Check), so the state is one lock's.
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{state{}} },
		Step: func(s, in, out any) []any {
			var res []any
			for _, n := range step(s.(state), in.(input), out.(output)) {
				res = append(res, n)
			}
			return res
		},
		Equal: func(a, b any) bool { return a.(state) == b.(state) },
		Hash:  hashState,
		DescribeOperation: func(in, out any) string {
			i, o := in.(input), out.(output)
			s := fmt.Sprintf("%s(%s, ttl %v) -> %s", i.Kind, short(i.Lease), time.Duration(i.TTL), o.Outcome)
			if o.Token != 0 {
				s += fmt.Sprintf(" %d", o.Token)
			}
			return s
		},
	}
	m := nm.ToModel()
	m.DescribeState = func(v any) string {
		var parts []string
		for _, x := range v.([]any) {
			s := x.(state)
			if s.Holder == "" {
				parts = append(parts, fmt.Sprintf("free (max %d)", s.Max))
			} else {
				parts = append(parts, fmt.Sprintf("%s tok %d (max %d)", short(s.Holder), s.Token, s.Max))
			}
		}
		return fmt.Sprint(parts)
	}
	return m
}

func short(lease string) string {
	if len(lease) > 14 {
		return lease[:14]
	}
	return lease
}

// Operations converts one lock's history into porcupine operations. Failed
// operations (definitely no effect), unknown reads and register operations
// are left out: they cannot change the lock. Times are made relative to
// the earliest call so the visualisation is readable.
func Operations(ops []history.Op) []porcupine.Operation {
	var out []porcupine.Operation
	var t0 int64 = math.MaxInt64
	for _, o := range ops {
		t0 = min(t0, o.Call)
	}
	for _, o := range ops {
		switch o.Kind {
		case history.Acquire, history.Renew, history.Release, history.Read:
		default:
			continue
		}
		if o.Outcome == history.Fail || (o.Kind == history.Read && o.Outcome == history.Unknown) {
			continue
		}
		ret := o.Return
		if o.Outcome == history.Unknown || ret == math.MaxInt64 {
			ret = math.MaxInt64
		} else {
			ret -= t0
		}
		tok := o.Token
		if o.Outcome == history.Held {
			tok = o.Holder
		}
		out = append(out, porcupine.Operation{
			ClientId: o.Client,
			Input:    input{Kind: o.Kind, Lease: o.Lease, TTL: o.TTL * int64(time.Millisecond), Call: o.Call - t0, Ret: ret},
			Call:     o.Call - t0,
			Output:   output{Outcome: o.Outcome, Token: tok},
			Return:   ret,
			Metadata: o.ID,
		})
	}
	return out
}

// LinResult is property (e) for one lock.
type LinResult struct {
	Name   string
	Ops    int
	Result porcupine.CheckResult
	Info   porcupine.LinearizationInfo
}

// Linearizable checks each lock's history separately (the partition by lock
// name), each with the given timeout.
func Linearizable(ops []history.Op, timeout time.Duration) []LinResult {
	byName := map[string][]history.Op{}
	for _, o := range ops {
		if o.Name != "" {
			byName[o.Name] = append(byName[o.Name], o)
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	m := Model()
	var res []LinResult
	for _, n := range names {
		pops := Operations(byName[n])
		r, info := porcupine.CheckOperationsVerbose(m, pops, timeout)
		res = append(res, LinResult{Name: n, Ops: len(pops), Result: r, Info: info})
	}
	return res
}
