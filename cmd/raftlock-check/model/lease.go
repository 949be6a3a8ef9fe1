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
// step returns every possible next state. Times are ns from the history's
// first call.
type state struct {
	Holder string // lease id holding the lock, "" when free
	Token  uint64 // the holder's fencing token; 0 when its grant's answer was lost
	// EarliestExpiry is the earliest time the holder's lease may be gone:
	// send + ttl of its latest grant or renewal.
	EarliestExpiry int64
	MaxToken       uint64 // highest token known granted on this lock
	// EarliestNext is the earliest time the next operation can take effect
	// at: the linearization points chosen so far, raised to EarliestExpiry
	// where an expiry was observed. Keeping it in the state makes one-sided
	// expiry exact.
	EarliestNext int64
	// Value is the holder's value: set by its grant, by its own retried
	// acquire and by its updates; a read must show it.
	Value string
}

// input is what porcupine sees of an operation. Times are ns from the
// history's first call.
type input struct {
	Kind  string
	Lease string
	Value string // acquire, update: the value sent
	TTLNs int64
	Call  int64
	Ret   int64 // MaxInt64 for unknown outcomes
}

type output struct {
	Outcome string
	Token   uint64 // ok: granted/renewed/read token; held: holder token
	Value   string // read: the value answered
}

// at returns the linearization point of an op in state s, or false when the
// op cannot take effect after s.EarliestNext and at or after notBefore.
func at(s state, in input, notBefore int64) (int64, bool) {
	p := max(s.EarliestNext, in.Call, notBefore)
	return p, p <= in.Ret
}

// reveal checks a token reported for the current holder against the state,
// learning it if the holder's grant answer was lost.
func reveal(s state, tok uint64) (state, bool) {
	if s.Token == 0 {
		if tok <= s.MaxToken {
			return s, false
		}
		s.Token, s.MaxToken = tok, tok
		return s, true
	}
	return s, s.Token == tok
}

// step is the sequential specification of one lock, with one-sided expiry.
func step(s state, in input, out output) []state {
	t := &transition{in: in}
	switch in.Kind {
	case history.Acquire:
		t.acquire(s, out)
	case history.Renew:
		t.renew(s, out)
	case history.Release:
		t.release(s, out)
	case history.Update:
		t.update(s, out)
	case history.Read:
		t.read(s, out)
	}
	return t.next
}

// transition collects the states that one operation, in, may lead to. Its
// helpers return a state and whether it is possible; add keeps the possible.
type transition struct {
	in   input
	next []state
}

func (t *transition) add(s state, ok bool) {
	if ok {
		t.next = append(t.next, s)
	}
}

// move advances s to the op's linearization point, at or after notBefore.
func (t *transition) move(s state, notBefore int64) (state, bool) {
	p, ok := at(s, t.in, notBefore)
	s.EarliestNext = p
	return s, ok
}

// expire: the holder's lease is gone, which may be observed only at or
// after its EarliestExpiry.
func (t *transition) expire(s state) (state, bool) {
	s, ok := t.move(s, s.EarliestExpiry)
	s.Holder, s.Token, s.EarliestExpiry, s.Value = "", 0, 0, ""
	return s, ok
}

// free: the holder released the lock.
func (t *transition) free(s state) (state, bool) {
	s, ok := t.move(s, 0)
	s.Holder, s.Token, s.EarliestExpiry, s.Value = "", 0, 0, ""
	return s, ok
}

// grant gives the lock to the op's lease with token tok (0: not known).
func (t *transition) grant(s state, tok uint64) (state, bool) {
	ok := true
	if s.Holder != "" { // a lease's own re-acquire after expiry is a new grant too
		s, ok = t.expire(s)
	} else {
		s, ok = t.move(s, 0)
	}
	if tok != 0 {
		if tok <= s.MaxToken {
			return s, false
		}
		s.MaxToken = tok
	}
	s.Holder, s.Token, s.EarliestExpiry, s.Value = t.in.Lease, tok, t.in.Call+t.in.TTLNs, t.in.Value
	return s, ok
}

// extend: the holder's lease lives at least the op's TTL from its send.
func (t *transition) extend(s state) (state, bool) {
	s, ok := t.move(s, 0)
	s.EarliestExpiry = max(s.EarliestExpiry, t.in.Call+t.in.TTLNs)
	return s, ok
}

// observe: the op saw the current holder with token tok.
func (t *transition) observe(s state, tok uint64) (state, bool) {
	s, revealed := reveal(s, tok)
	s, ok := t.move(s, 0)
	return s, revealed && ok
}

// observeExtend: the op saw its own lease holding the lock with token tok,
// and extended it.
func (t *transition) observeExtend(s state, tok uint64) (state, bool) {
	s, revealed := reveal(s, tok)
	s, ok := t.extend(s)
	return s, revealed && ok
}

// notHolder: the op's lease does not hold the lock, either because another
// (or none) does or because its own lease has expired.
func (t *transition) notHolder(s state) {
	if s.Holder != t.in.Lease {
		t.add(t.move(s, 0))
	} else {
		t.add(t.expire(s))
	}
}

func (t *transition) acquire(s state, out output) {
	ownLease := s.Holder == t.in.Lease
	switch out.Outcome {
	case history.OK:
		if ownLease { // idempotent retry: same token, deadline pushed, value set again
			n, ok := t.observeExtend(s, out.Token)
			n.Value = t.in.Value
			t.add(n, ok)
		}
		t.add(t.grant(s, out.Token))
	case history.Held:
		if out.Token == 0 && !ownLease {
			// Refused with no holder named: the lock is promised to a
			// parked waiter whose grant has not applied (an acquire
			// never jumps the queue), so it may be free here.
			t.add(t.move(s, 0))
		} else if s.Holder != "" && !ownLease {
			t.add(t.observe(s, out.Token))
		}
	case history.Unknown:
		t.add(s, true)
		if ownLease {
			n, ok := t.extend(s)
			n.Value = t.in.Value
			t.add(n, ok)
		} else {
			t.add(t.grant(s, 0))
		}
	}
}

func (t *transition) renew(s state, out output) {
	switch out.Outcome {
	case history.OK:
		if s.Holder == t.in.Lease {
			t.add(t.observeExtend(s, out.Token))
		}
	case history.NotHolder:
		t.notHolder(s)
	case history.Unknown:
		t.add(s, true)
		if s.Holder == t.in.Lease {
			t.add(t.extend(s))
		}
	}
}

func (t *transition) release(s state, out output) {
	switch out.Outcome {
	case history.OK:
		if s.Holder == t.in.Lease {
			t.add(t.free(s))
		}
	case history.NotHolder:
		t.notHolder(s)
	case history.Unknown:
		t.add(s, true)
		if s.Holder == t.in.Lease {
			t.add(t.free(s))
		}
	}
}

// update: the holder sets the lock's value; token, TTL and deadline stay.
// Answered like a renew (the lease body), so an OK carries the token.
func (t *transition) update(s state, out output) {
	switch out.Outcome {
	case history.OK:
		if s.Holder == t.in.Lease {
			n, ok := t.observe(s, out.Token)
			n.Value = t.in.Value
			t.add(n, ok)
		}
	case history.NotHolder:
		t.notHolder(s)
	case history.Unknown:
		t.add(s, true)
		if s.Holder == t.in.Lease {
			n, ok := t.move(s, 0)
			n.Value = t.in.Value
			t.add(n, ok)
		}
	}
}

// read: a plain or blocking read (a blocking read is one read, performed
// when it is answered, so its interval is the whole call).
func (t *transition) read(s state, out output) {
	switch out.Outcome {
	case history.OK:
		if s.Holder != "" && s.Value == out.Value {
			t.add(t.observe(s, out.Token))
		}
	case history.Free:
		if s.Holder == "" {
			t.add(t.move(s, 0))
		} else {
			t.add(t.expire(s))
		}
	}
}

func hashState(v any) uint64 {
	s := v.(state)
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%d|%d|%d|%d|%s", s.Holder, s.Token, s.EarliestExpiry, s.MaxToken, s.EarliestNext, s.Value)
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
			s := fmt.Sprintf("%s(%s, ttl %v) -> %s", i.Kind, short(i.Lease), time.Duration(i.TTLNs), o.Outcome)
			if o.Token != 0 {
				s += fmt.Sprintf(" %d", o.Token)
			}
			if i.Value != "" {
				s = fmt.Sprintf("%s value %q", s, i.Value)
			}
			if o.Value != "" {
				s += fmt.Sprintf(" value %q", o.Value)
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
				parts = append(parts, fmt.Sprintf("free (max %d)", s.MaxToken))
			} else {
				parts = append(parts, fmt.Sprintf("%s tok %d value %q (max %d)", short(s.Holder), s.Token, s.Value, s.MaxToken))
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
		case history.Acquire, history.Renew, history.Release, history.Update, history.Read:
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
			Input:    input{Kind: o.Kind, Lease: o.Lease, Value: inValue(o), TTLNs: o.TTLMs * int64(time.Millisecond), Call: o.Call - t0, Ret: ret},
			Call:     o.Call - t0,
			Output:   output{Outcome: o.Outcome, Token: tok, Value: outValue(o)},
			Return:   ret,
			Metadata: o.ID,
		})
	}
	return out
}

// inValue is the value an acquire or update sends; outValue the one a read got.
func inValue(o history.Op) string {
	if o.Kind == history.Read {
		return ""
	}
	return o.Value
}

func outValue(o history.Op) string {
	if o.Kind == history.Read {
		return o.Value
	}
	return ""
}

// LinResult is property (e) for one lock.
type LinResult struct {
	Name   string
	Ops    int
	Result porcupine.CheckResult
	Info   porcupine.LinearizationInfo
}

// Linearizable checks each lock's history separately (the partition by lock
// name), each with the given timeout. The model knows exclusive leases with
// TTLs of their own: a lock that any op took shared or through a session is
// left out (the workload keeps those on names of their own, checked by (a),
// (b), (h) and (j)), and so are semaphores.
func Linearizable(ops []history.Op, timeout time.Duration) []LinResult {
	byName := map[string][]history.Op{}
	outside := map[string]bool{}
	for _, o := range ops {
		switch o.Kind {
		case history.Acquire, history.Renew, history.Release, history.Update, history.Read:
		default:
			continue // semaphores, registers, sessions
		}
		if o.Name == "" {
			continue
		}
		byName[o.Name] = append(byName[o.Name], o)
		if o.Mode != "" || o.Session != "" {
			outside[o.Name] = true
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		if !outside[n] {
			names = append(names, n)
		}
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
