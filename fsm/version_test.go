package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// Version 1 bytes written by every release so far: they must decode and
// apply forever, so their layout is pinned here byte by byte.
func TestVersion1BytesStayReadable(t *testing.T) {
	// version 1, acquire, stamp 5 (zigzag 10), ttl 1000 (zigzag 2000 = d0 0f),
	// lock-delay 0, then name "a", owner "o", lease "L", node id "", node addr "".
	v1 := []byte{1, 1, 10, 0xd0, 0x0f, 0, 1, 'a', 1, 'o', 1, 'L', 0, 0}
	want := Command{Version: 1, Op: OpAcquire, Stamp: 5, TTL: 1000, Name: "a", Owner: "o", LeaseID: "L"}
	c, err := DecodeCommand(v1)
	if err != nil || c != want {
		t.Fatalf("decode v1: %+v, %v; want %+v", c, err, want)
	}
	if got := (&Command{Op: OpAcquire, Stamp: 5, TTL: 1000, Name: "a", Owner: "o", LeaseID: "L"}).Encode(nil); !bytes.Equal(got, v1) {
		t.Errorf("version 0 (= 1) encodes as %v, want %v", got, v1)
	}
}

func TestCommandVersionsRoundTrip(t *testing.T) {
	base := Command{Op: OpRenew, Stamp: -7, TTL: 300, LockDelay: 20, Name: "n", Owner: "o", LeaseID: "L", NodeID: "i", NodeAddr: "a:1"}
	v2 := base
	v2.Version, v2.StampTerm = 2, 1<<40
	got, err := DecodeCommand(v2.Encode(nil))
	if err != nil || got != v2 {
		t.Errorf("v2 round trip: %+v, %v; want %+v", got, err, v2)
	}
	// Version 1 has no place for the stamp's term.
	v1 := v2
	v1.Version = 1
	want := base
	want.Version = 1
	if got, err := DecodeCommand(v1.Encode(nil)); err != nil || got != want {
		t.Errorf("v1 round trip: %+v, %v; want %+v", got, err, want)
	}
	if len(v2.Encode(nil)) <= len(v1.Encode(nil)) {
		t.Error("v2 is not longer than v1: no stamp term written")
	}
}

// A version this build does not know is refused as a whole (and reported
// as an unknown op, so the node stops and asks for an upgrade); version 0
// was never written.
func TestUnknownCommandVersionIsRefused(t *testing.T) {
	v2 := (&Command{Version: 2, Op: OpTick, StampTerm: 3}).Encode(nil)
	for _, v := range []byte{MaxCommandVersion + 1, 255} {
		data := append([]byte{v}, v2[1:]...)
		_, err := DecodeCommand(data)
		if !errors.Is(err, ErrUnknownVersion) || !errors.Is(err, ErrUnknownOp) {
			t.Errorf("version %d: err %v, want ErrUnknownVersion and ErrUnknownOp", v, err)
		}
		m := New()
		if _, err := m.Apply(1, 1, data); err == nil || m.Clock().Index != 0 {
			t.Errorf("version %d applied (err %v, index %d)", v, err, m.Clock().Index)
		}
	}
	if _, err := DecodeCommand(append([]byte{0}, v2[1:]...)); !errors.Is(err, ErrBadCommand) {
		t.Errorf("version 0: err %v, want ErrBadCommand", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("encoding an unknown version did not panic")
		}
	}()
	(&Command{Version: MaxCommandVersion + 1, Op: OpTick}).Encode(nil)
}

// The independent review's scenario. A leader stamps up to 10 s in term 5
// and grants a lease with a 10 s TTL at 10 s. It had read a stamp of 0 in
// term 5 for another entry, was deposed, won term 7, and only then logged
// that entry: the first entry of term 7. Then it ticks in term 7 at 13 s:
// only 3 s have passed since the grant. Version 1 bases term 7 on the stale
// stamp and counts 13 s again, ending the lease 7 s early (two holders if
// another client acquires it); version 2 knows the stamp is term 5's and
// counts nothing for it.
func TestStaleStampTermCountsNoTime(t *testing.T) {
	for _, tc := range []struct {
		version     uint8
		expiredAt13 bool
	}{
		{1, true}, // the old hazard, kept for version 1 entries
		{2, false},
	} {
		t.Run(fmt.Sprintf("v%d", tc.version), func(t *testing.T) {
			m := New()
			index := uint64(0)
			apply := func(term, stampTerm uint64, stampMs int64, c Command) Result {
				t.Helper()
				index++
				c.Version, c.Stamp, c.StampTerm = tc.version, stampMs*ms, stampTerm
				r, err := m.Apply(index, term, c.Encode(nil))
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			apply(5, 5, 0, tick())
			if r := apply(5, 5, 10_000, acquire("x", "L1", 10_000)); r.Status != StatusOK {
				t.Fatalf("acquire: %v", r.Status)
			}
			apply(7, 5, 0, tick()) // stamped in term 5, logged first in term 7
			r := apply(7, 7, 13_000, acquire("x", "L2", 10_000))
			if expired := r.Status == StatusOK; expired != tc.expiredAt13 {
				t.Fatalf("at the term-7 entry stamped 13 s (3 s after the grant): acquire by another lease %v, expired %v, want expired %v",
					r.Status, expired, tc.expiredAt13)
			}
			if tc.version == 1 {
				return
			}
			// Term 7 counts from its own first stamp (13 s), where the
			// clock stood at 10 s: the lease ends at stamp 23 s (the
			// failover gap lengthens a lease, never shortens it).
			if r := apply(7, 7, 22_999, acquire("x", "L2", 10_000)); r.Status != StatusHeld {
				t.Errorf("at 22.999 s: %v, want held", r.Status)
			}
			// A stamp of term 5 arriving late inside term 7 adds nothing either.
			apply(7, 5, 100_000, tick())
			if r := apply(7, 7, 22_999, acquire("x", "L2", 10_000)); r.Status != StatusHeld {
				t.Errorf("after a late term-5 stamp: %v, want held", r.Status)
			}
			if r := apply(7, 7, 23_000, acquire("x", "L2", 10_000)); r.Status != StatusOK {
				t.Errorf("at 23 s: %v, want ok", r.Status)
			}
		})
	}
}

// A version 2 log whose stamps were all read in their entries' terms counts
// time exactly as the same log in version 1: the format change alters
// nothing for honest stamps.
func TestVersion2MatchingTermsCountLikeVersion1(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		entries := genLog(rng.IntN, 150)
		as := func(v uint8) []logEntry {
			out := make([]logEntry, len(entries))
			for i, e := range entries {
				c, err := DecodeCommand(e.data)
				if err != nil {
					t.Fatal(err)
				}
				c.StampTerm = e.term
				if MinVersion(c) == commandVersion1 { // force release (3), update and values (4) keep theirs; with their own term they count time as the rest
					c.Version = v
				}
				out[i] = logEntry{e.index, e.term, c.Encode(nil)}
			}
			return out
		}
		m1, m2 := New(), New()
		r1, r2 := applyAll(t, m1, as(1)), applyAll(t, m2, as(2))
		if !reflect.DeepEqual(r1, r2) || m1.Clock() != m2.Clock() || !bytes.Equal(snapshotBytes(t, m1), snapshotBytes(t, m2)) {
			t.Fatalf("seed %d: v1 and v2 with matching stamp terms differ", seed)
		}
	}
}

// Version 5 bytes: version 4's layout, then the session id, the mode byte
// and the limit. Pinned so that a later build keeps reading them.
func TestVersion5BytesStayReadable(t *testing.T) {
	// version 5, semaphore acquire, stamp 5 (zigzag 10), stamp term 2,
	// ttl 0, lock-delay 0, name "s", owner "o", lease "L", node id "",
	// node addr "", value "", session "S", mode 0, limit 3 (zigzag 6).
	v5 := []byte{5, 12, 10, 2, 0, 0, 1, 's', 1, 'o', 1, 'L', 0, 0, 0, 1, 'S', 0, 6}
	want := Command{Version: 5, Op: OpSemAcquire, Stamp: 5, StampTerm: 2, Name: "s", Owner: "o", LeaseID: "L", SessionID: "S", Limit: 3}
	c, err := DecodeCommand(v5)
	if err != nil || c != want {
		t.Fatalf("decode v5: %+v, %v; want %+v", c, err, want)
	}
	if got := want.Encode(nil); !bytes.Equal(got, v5) {
		t.Errorf("encodes as %v, want %v", got, v5)
	}
	shared := Command{Version: 5, Op: OpAcquire, Stamp: 1, StampTerm: 1, Name: "a", LeaseID: "L", TTL: 10, Mode: ModeShared}
	if got, err := DecodeCommand(shared.Encode(nil)); err != nil || got != shared {
		t.Errorf("shared acquire round trip: %+v, %v", got, err)
	}
}

// The ops of version 5 exist only in version 5 commands, and a session, a
// mode or a limit needs version 5: an older version cannot carry them.
func TestVersion5OpsOnlyInVersion5(t *testing.T) {
	for op := OpSessionCreate; op <= OpSemRelease; op++ {
		for v := uint8(1); v < 5; v++ {
			if OpInVersion(op, v) {
				t.Errorf("%v allowed in version %d", op, v)
			}
			// Bytes of an older version with the new op: refused.
			data := (&Command{Version: 4, Op: OpTick, StampTerm: 1}).Encode(nil)
			data[0], data[1] = v, byte(op)
			if _, err := DecodeCommand(data); !errors.Is(err, ErrUnknownOp) {
				t.Errorf("%v in version %d: err %v, want ErrUnknownOp", op, v, err)
			}
		}
		if !OpInVersion(op, 5) || MinVersion(Command{Op: op}) < 5 {
			t.Errorf("%v: not a version 5 op", op)
		}
	}
	for _, c := range []Command{
		{Op: OpAcquire, SessionID: "S"},
		{Op: OpAcquire, Mode: ModeShared},
		{Op: OpAcquire, Limit: 2},
	} {
		if MinVersion(c) < 5 || Fits(c, 4) {
			t.Errorf("%+v fits version 4 (min %d)", c, MinVersion(c))
		}
	}
	if MinVersion(Command{Op: OpAcquire, TTL: 10}) != 1 {
		t.Error("a plain acquire needs more than version 1")
	}
	// A mode this build does not know came from a newer build.
	data := (&Command{Version: 5, Op: OpAcquire, StampTerm: 1, Mode: ModeShared}).Encode(nil)
	data[len(data)-2] = 7
	if _, err := DecodeCommand(data); !errors.Is(err, ErrUnknownOp) {
		t.Errorf("mode 7: err %v, want ErrUnknownOp", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("a session in a version 4 command did not panic")
		}
	}()
	(&Command{Version: 4, Op: OpAcquire, SessionID: "S"}).Encode(nil)
}

func TestStatusNames(t *testing.T) {
	for s, want := range map[Status]string{StatusNoSession: "no_session", StatusFull: "full", StatusLimitMismatch: "limit_mismatch", StatusSessionFull: "session_full"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", s, s.String(), want)
		}
	}
}
