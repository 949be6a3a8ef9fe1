package model

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/fsm"
)

// Restore is one backup restore the checker made (faults.Restore): the
// backup it saved, when, and the window the restore took effect in.
type Restore struct {
	Saved int64 // CLOCK_MONOTONIC: the save's answer
	// Sent is the first send of the restore, Answered the answer of the
	// send that succeeded (MaxTime if none did: it may have taken effect at
	// any time after Sent).
	Sent, Answered int64
	Backup         []byte // the file, as GET /v1/snapshot answered it
	// Maybe: the restore may or may not have taken effect (its leader
	// crashed before replicating it, faults.RestoreCrash); if it did, it
	// did inside [Sent, Answered]. The epoch after it cannot know whether
	// it starts from the backup's state or from the one before, so every
	// name is left out of it until a new lease's grant proves the lock
	// free (Held), and (k) judges nothing of it (RestoreFencing).
	Maybe bool
}

// backupHeader is the backup file's header (raftnode/backup.go, docs/API.md
// "Backup"): magic, version u32, index u64, term u64, fsm length u64.
const backupHeader = 16 + 4 + 8 + 8 + 8

// Held reads the backup and reports which of the names ops use it holds:
// "lock:"+name for a lock (any mode) and "sem:"+name for a semaphore with a
// permit. A restore brings these holders back, with their old tokens and
// some of their time: the epoch after it starts with state the checker's
// models cannot see, so those names are left out of it.
func (r Restore) Held(ops []history.Op) (map[string]bool, error) {
	if r.Maybe {
		held := map[string]bool{}
		for _, o := range ops {
			switch {
			case o.Name == "":
			case isSem(o.Kind):
				held["sem:"+o.Name] = true
			default:
				held["lock:"+o.Name] = true
			}
		}
		return held, nil
	}
	b := r.Backup
	if len(b) < backupHeader+32 {
		return nil, fmt.Errorf("backup of %d bytes is too short", len(b))
	}
	n := binary.BigEndian.Uint64(b[backupHeader-8:])
	if n > uint64(len(b)-backupHeader) {
		return nil, fmt.Errorf("backup header says %d state bytes, file has %d", n, len(b)-backupHeader)
	}
	m := fsm.New()
	if err := m.Restore(bytes.NewReader(b[backupHeader : backupHeader+int(n)])); err != nil {
		return nil, fmt.Errorf("backup state: %w", err)
	}
	held := map[string]bool{}
	for _, o := range ops {
		if o.Name == "" {
			continue
		}
		if isSem(o.Kind) {
			if s, ok := m.Semaphore(o.Name); ok && len(s.Holders) > 0 {
				held["sem:"+o.Name] = true
			}
		} else if len(m.Holders(o.Name)) > 0 {
			held["lock:"+o.Name] = true
		}
	}
	return held, nil
}

func isSem(kind string) bool {
	switch kind {
	case history.SemAcquire, history.SemRenew, history.SemRelease, history.SemRead:
		return true
	}
	return false
}

// mutating reports whether an op of this kind may change the state.
func mutating(kind string) bool {
	switch kind {
	case history.Acquire, history.Renew, history.Release, history.Update,
		history.SessCreate, history.SessRenew, history.SessClose,
		history.SemAcquire, history.SemRenew, history.SemRelease:
		return true
	}
	return false
}

// Epoch is the part of a history between two restores that the checker's
// per-lock models judge as a history of its own.
type Epoch struct {
	Ops []history.Op
	// Left out are the names the restore that opened the epoch brought
	// holders back to ("lock:jobs/0", "sem:sem/1"): all their ops in it,
	// or, for a lock in From, those before it was seen free again.
	Left []string
	// From maps a lock the backup held to the answer of the first grant
	// that proves every restored holder gone: an exclusive grant of a new
	// lease (first sent after the restore answered). The lock is judged
	// from there on.
	From map[string]int64
}

// freedAt finds, for each lock in left, the first exclusive grant of a new
// lease after restore r, answered before the next restore (upper) was sent
// and well inside its lease (answered within half its TTL: it cannot have
// expired before its answer, so nothing but its own client changed the
// lock between the grant and its answer). Grants in a session are not
// used: their lease lasts as long as the session, which the grant does not
// show.
func freedAt(ops []history.Op, r, upper *Restore, left map[string]bool) map[string]history.Op {
	firstSend := map[string]int64{}
	for _, o := range ops { // sorted by call
		if o.Lease != "" && !isSem(o.Kind) {
			if _, ok := firstSend[o.Lease]; !ok {
				firstSend[o.Lease] = o.Call
			}
		}
	}
	out := map[string]history.Op{}
	for _, o := range ops {
		if o.Kind != history.Acquire || o.Outcome != history.OK || o.Mode == history.Shared || !left["lock:"+o.Name] ||
			firstSend[o.Lease] <= r.Answered || (upper != nil && o.Return >= upper.Sent) ||
			o.Session != "" || 2*(o.Return-o.Call) >= o.TTLMs*int64(time.Millisecond) {
			continue
		}
		if g, ok := out[o.Name]; !ok || o.Return < g.Return {
			out[o.Name] = o
		}
	}
	return out
}

// Epochs splits a history at restores (sorted by Sent). A restore replaces
// the whole state with the backup's at one instant inside
// [Sent, Answered], so:
//   - an op answered before a restore was sent belongs before it only;
//     one sent after it answered, after it only;
//   - an op in flight across a restore (sent before its answer, answered
//     after its send, or never) may have taken effect on either side: in
//     both epochs a state-changing one becomes an unknown outcome (it may
//     have applied, at any later time; it proves nothing), and a read is
//     left out (it may show either state);
//   - the epoch after a restore starts from the backup's state: names the
//     backup holds start held by leases granted long before, which the
//     epoch's ops cannot account for, so their ops are left out of it;
//     every other name starts free (grants made after the save are gone)
//     and is judged as usual.
//
// An unknown outcome stays unknown in every later epoch too. Within an
// epoch every property holds as on a cluster that was never restored.
func Epochs(ops []history.Op, restores []Restore) ([]Epoch, error) {
	out := make([]Epoch, 0, len(restores)+1)
	for e := 0; e <= len(restores); e++ {
		var lower, upper *Restore
		var left map[string]bool
		if e > 0 {
			lower = &restores[e-1]
			var err error
			if left, err = lower.Held(ops); err != nil {
				return nil, err
			}
		}
		if e < len(restores) {
			upper = &restores[e]
		}
		ep := Epoch{From: map[string]int64{}}
		var freed map[string]history.Op
		if lower != nil {
			freed = freedAt(ops, lower, upper, left)
		}
		for k := range left {
			ep.Left = append(ep.Left, k)
		}
		for name, g := range freed {
			ep.From["lock:"+name] = g.Return
		}
		sort.Strings(ep.Left)
		for _, o := range ops {
			if lower != nil && o.Return < lower.Sent {
				continue
			}
			if upper != nil && o.Call >= upper.Answered {
				continue
			}
			key := "lock:" + o.Name
			if isSem(o.Kind) {
				key = "sem:" + o.Name
			}
			across := (lower != nil && o.Call < lower.Answered) || (upper != nil && o.Return >= upper.Sent)
			if o.Name != "" && left[key] {
				g, ok := freed[o.Name]
				switch {
				case !ok || isSem(o.Kind):
					continue
				case o.ID == g.ID:
				case o.Definite() && o.Return < g.Return:
					// Before the grant that proves the restored holders
					// gone took effect: nothing it did outlives that grant.
					continue
				case o.Call < g.Return:
					// In flight as that grant answered: it may have taken
					// effect after it.
					across = true
				}
			}
			if across && o.Definite() {
				if !mutating(o.Kind) {
					continue
				}
				o = unknown(o)
			}
			ep.Ops = append(ep.Ops, o)
		}
		out = append(out, ep)
	}
	return out, nil
}

// unknown turns an op into one whose outcome is unknown: as sent, never
// answered.
func unknown(o history.Op) history.Op {
	o.Outcome, o.Return = history.Unknown, MaxTime
	o.Token, o.Holder, o.Index, o.Version, o.Err = 0, 0, 0, 0, ""
	o.GotLimit, o.Slot, o.Slots, o.Tokens = 0, 0, nil, nil
	if o.Kind == history.Read {
		o.Value = ""
	}
	return o
}

// RestoreFencing is property (k), what a restore still promises
// (docs/API.md "Backup"): it rolls leases back, but
//   - every lock's index after it is above every index read before it: a
//     read of a lock sent after the restore answered shows an index at
//     least the highest index read or token granted on that lock and
//     answered before the restore answered (strictly above those answered
//     before it was sent: the restore lands past them);
//   - every new grant after it gets a larger token than every grant
//     before it, on any lock or semaphore: an acquire of a lease first sent
//     after the restore answered is granted a token above every token
//     acknowledged before it answered. (A retry of a lease the backup holds
//     answers that lease's old token, so leases first sent before are not
//     new grants.)
//
// A restore with no definite answer, or one that may not have taken effect
// (Maybe), promises nothing checkable here.
//
// The index promise is global (docs/API.md: "every lock's index (held,
// free or never seen) is above every index any read or grant answered
// before it, on any lock"): a read of any lock after the restore is also
// checked against the highest index read and token granted on any lock or
// semaphore before the restore was sent.
func RestoreFencing(ops []history.Op, restores []Restore) []Violation {
	var vs []Violation
	firstSend := map[string]int64{}
	for _, o := range ops { // sorted by call
		if o.Lease == "" {
			continue
		}
		k := "L" + o.Lease
		if isSem(o.Kind) {
			k = "S" + o.Lease
		}
		if _, ok := firstSend[k]; !ok {
			firstSend[k] = o.Call
		}
	}
	for ri, r := range restores {
		if r.Answered == MaxTime || r.Maybe {
			continue
		}
		type mark struct {
			v      uint64
			strict bool // answered before the restore was sent
			op     history.Op
		}
		before := map[string][]mark{} // lock -> index or token answered before the restore answered
		var topTok *history.Op
		for _, o := range ops {
			if o.Return >= r.Answered || !o.Definite() {
				continue
			}
			switch {
			case o.Kind == history.Read && (o.Outcome == history.OK || o.Outcome == history.Free):
				before[o.Name] = append(before[o.Name], mark{o.Index, o.Return < r.Sent, o})
			case o.Kind == history.Acquire && o.Outcome == history.OK:
				before[o.Name] = append(before[o.Name], mark{o.Token, o.Return < r.Sent, o})
			}
			if o.Outcome == history.OK && o.Token > 0 && (o.Kind == history.Acquire || o.Kind == history.SemAcquire || o.Kind == history.Renew || o.Kind == history.SemRenew) {
				if topTok == nil || o.Token > topTok.Token {
					c := o
					topTok = &c
				}
			}
		}
		// The highest mark per lock, and the highest strict one.
		type top struct{ any, strict *mark }
		tops := map[string]top{}
		for name, ms := range before {
			var t top
			for i := range ms {
				m := &ms[i]
				if t.any == nil || m.v > t.any.v {
					t.any = m
				}
				if m.strict && (t.strict == nil || m.v > t.strict.v) {
					t.strict = m
				}
			}
			tops[name] = t
		}
		// The highest index or token answered on any lock or semaphore
		// before the restore was sent: every lock's index after it is
		// above (docs/API.md: "on any lock"). Ones answered while it ran
		// may be past the install, above locks nobody wrote since, so they
		// are compared per lock only.
		var global *history.Op
		var globalV uint64
		for _, o := range ops {
			if o.Return >= r.Sent || !o.Definite() {
				continue
			}
			v, ok := indexOrToken(o)
			if ok && (global == nil || v > globalV) {
				c := o
				global, globalV = &c, v
			}
		}
		for _, o := range ops {
			if o.Call <= r.Answered || !o.Definite() {
				continue
			}
			if o.Kind == history.Read && (o.Outcome == history.OK || o.Outcome == history.Free) {
				t := tops[o.Name]
				switch {
				case t.strict != nil && o.Index <= t.strict.v:
					vs = append(vs, Violation{"k", fmt.Sprintf("lock %q: read %s (c%d, sent t=%.3fs, after restore %d answered at t=%.3fs) answered index %d, not above %d answered by %s %s (c%d) at t=%.3fs before the restore was sent",
						o.Name, o.ID, o.Client, secs(o.Call), ri+1, secs(r.Answered), o.Index, t.strict.v, t.strict.op.Kind, t.strict.op.ID, t.strict.op.Client, secs(t.strict.op.Return))})
				case t.any != nil && o.Index < t.any.v:
					vs = append(vs, Violation{"k", fmt.Sprintf("lock %q: read %s (c%d, sent t=%.3fs, after restore %d answered at t=%.3fs) answered index %d, below %d answered by %s %s (c%d) at t=%.3fs while the restore ran",
						o.Name, o.ID, o.Client, secs(o.Call), ri+1, secs(r.Answered), o.Index, t.any.v, t.any.op.Kind, t.any.op.ID, t.any.op.Client, secs(t.any.op.Return))})
				case global != nil && o.Index <= globalV:
					vs = append(vs, Violation{"k", fmt.Sprintf("lock %q: read %s (c%d, sent t=%.3fs, after restore %d answered at t=%.3fs) answered index %d, not above %d answered by %s %s on %q (c%d) at t=%.3fs before the restore was sent",
						o.Name, o.ID, o.Client, secs(o.Call), ri+1, secs(r.Answered), o.Index, globalV, global.Kind, global.ID, global.Name, global.Client, secs(global.Return))})
				}
			}
			if topTok != nil && o.Outcome == history.OK && (o.Kind == history.Acquire || o.Kind == history.SemAcquire) {
				k := "L" + o.Lease
				if o.Kind == history.SemAcquire {
					k = "S" + o.Lease
				}
				if firstSend[k] > r.Answered && o.Token <= topTok.Token {
					vs = append(vs, Violation{"k", fmt.Sprintf("%q: new lease %s (%s, c%d, first sent t=%.3fs, after restore %d answered at t=%.3fs) was granted token %d, not above token %d of %s %q (%s, c%d) acknowledged at t=%.3fs",
						o.Name, o.Lease, o.ID, o.Client, secs(firstSend[k]), ri+1, secs(r.Answered), o.Token, topTok.Token, topTok.Kind, topTok.Name, topTok.ID, topTok.Client, secs(topTok.Return))})
				}
			}
		}
	}
	return vs
}

// indexOrToken is the Raft index an op's answer shows: a read's index, a
// grant's token (a lock's or a permit's).
func indexOrToken(o history.Op) (uint64, bool) {
	switch {
	case o.Kind == history.Read && (o.Outcome == history.OK || o.Outcome == history.Free):
		return o.Index, true
	case (o.Kind == history.Acquire || o.Kind == history.SemAcquire) && o.Outcome == history.OK:
		return o.Token, true
	}
	return 0, false
}
