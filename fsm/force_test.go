package fsm

import (
	"errors"
	"reflect"
	"testing"
)

func forceRelease(name string) Command {
	return Command{Version: commandVersion3, Op: OpForceRelease, Name: name}
}

// A force release ends the holder's lease as its expiry would: the lock
// enters its lock-delay (acquires get held with the time left), the old
// holder's renew gets not_holder, and the lock is free when the delay ends,
// granted with a larger token.
func TestForceReleaseStartsLockDelay(t *testing.T) {
	l := newLog(t).at(0)
	c := acquire("a", "L1", 10_000)
	c.LockDelay = 500
	granted := l.apply(c).Lock
	r := l.at(1000).apply(forceRelease("a"))
	if r.Status != StatusOK || r.Lock.LeaseID != "L1" || r.Lock.Token != granted.Token || len(r.Freed) != 0 {
		t.Fatalf("force release of a held lock: %+v", r)
	}
	if _, ok := l.m.Get("a"); ok {
		t.Fatal("a force-released lock still reads as held")
	}
	if r := l.at(1100).apply(renew("a", "L1", 0)); r.Status != StatusNotHolder {
		t.Fatalf("old holder's renew after force release: %v", r.Status)
	}
	r = l.at(1200).apply(acquire("a", "L2", 1000))
	if r.Status != StatusHeld || r.Holder.LeaseID != "L1" || r.Retry != 300 {
		t.Fatalf("acquire during the lock-delay: %+v", r)
	}
	// A force release during the lock-delay changes nothing.
	if r := l.at(1300).apply(forceRelease("a")); r.Status != StatusOK || r.Lock != (Lock{}) || len(r.Freed) != 0 {
		t.Fatalf("force release in lock-delay: %+v", r)
	}
	if r := l.at(1400).apply(acquire("a", "L2", 1000)); r.Status != StatusHeld || r.Retry != 100 {
		t.Fatalf("lock-delay moved by a second force release: %+v", r)
	}
	if r := l.at(1500).apply(tick()); !reflect.DeepEqual(r.Freed, []string{"a"}) {
		t.Fatalf("end of lock-delay freed %v", r.Freed)
	}
	r = l.apply(acquire("a", "L2", 1000))
	if r.Status != StatusOK || r.Lock.Token <= granted.Token {
		t.Fatalf("acquire after the lock-delay: %+v (old token %d)", r, granted.Token)
	}
	if r := l.apply(release("a", "L1")); r.Status != StatusNotHolder {
		t.Fatalf("old holder's release: %v", r.Status)
	}
}

// Without lock-delay the lock is free at once, and reported freed so the
// leader serves its waiters.
func TestForceReleaseWithoutLockDelayFrees(t *testing.T) {
	l := newLog(t).at(0)
	l.apply(acquire("a", "L1", 10_000))
	r := l.apply(forceRelease("a"))
	if r.Status != StatusOK || r.Lock.LeaseID != "L1" || !reflect.DeepEqual(r.Freed, []string{"a"}) {
		t.Fatalf("force release without lock-delay: %+v", r)
	}
	if n := l.m.HeldCount(); n != 0 {
		t.Fatalf("held count %d after force release", n)
	}
	if _, ok := l.m.NextTimer(); ok {
		t.Fatal("a timer survived the force release")
	}
	if r := l.apply(acquire("a", "L2", 1000)); r.Status != StatusOK {
		t.Fatalf("acquire after force release: %v", r.Status)
	}
}

// A free lock: nothing to end, StatusOK with an empty Lock (a retried force
// release succeeds and says it ended nothing). A lease past its deadline is
// settled first, as every command on a lock does: the force release finds
// it expired.
func TestForceReleaseOfFreeLockIsNoOp(t *testing.T) {
	l := newLog(t).at(0)
	if r := l.apply(forceRelease("nobody")); r.Status != StatusOK || r.Lock != (Lock{}) || len(r.Freed) != 0 {
		t.Fatalf("force release of a free lock: %+v", r)
	}
	if _, ok := l.m.NextTimer(); ok || l.m.HeldCount() != 0 {
		t.Fatal("force release of a free lock changed the state")
	}
	l.apply(acquire("b", "L1", 1000))
	if r := l.at(1000).apply(forceRelease("b")); r.Status != StatusOK || r.Lock != (Lock{}) || r.Expired != 1 {
		t.Fatalf("force release of an expired lease: %+v", r)
	}
	if r := l.apply(Command{Version: commandVersion3, Op: OpForceRelease}); r.Status != StatusInvalid {
		t.Fatalf("force release without a name: %v", r.Status)
	}
}

// OpForceRelease exists only in version 3 commands: a version 1 or 2
// command carrying it is refused like an unknown op (builds that read up to
// 2 refuse it so, and a version must mean the same to every build), and
// Encode will not write it.
func TestForceReleaseOnlyInVersion3(t *testing.T) {
	fr := forceRelease("a")
	v3 := fr.Encode(nil)
	c, err := DecodeCommand(v3)
	if err != nil || c.Op != OpForceRelease || c.Version != 3 {
		t.Fatalf("v3 force release: %+v, %v", c, err)
	}
	for _, v := range []byte{1, 2} {
		data := append([]byte{v}, v3[1:]...)
		if _, err := DecodeCommand(data); !errors.Is(err, ErrUnknownOp) {
			t.Errorf("force release in a version %d command: err %v, want ErrUnknownOp", v, err)
		}
		if _, err := New().Apply(1, 1, data); !errors.Is(err, ErrUnknownOp) {
			t.Errorf("apply force release in version %d: err %v", v, err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Encode wrote a force release in version %d", v)
				}
			}()
			(&Command{Version: v, Op: OpForceRelease, Name: "a"}).Encode(nil)
		}()
	}
	for _, op := range []Op{OpAcquire, OpRenew, OpRelease, OpTick, OpSetNode, OpRemoveNode} {
		if !OpInVersion(op, 1) || !OpInVersion(op, 2) || !OpInVersion(op, 3) {
			t.Errorf("%v not valid in every version", op)
		}
	}
	if OpInVersion(OpForceRelease+1, 3) || OpInVersion(OpForceRelease, MaxCommandVersion+1) {
		t.Error("OpInVersion accepts an op or a version no build knows")
	}
}
