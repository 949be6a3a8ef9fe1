package fsm

import (
	"bytes"
	"errors"
	"testing"
)

func update(name, lease, value string) Command {
	return Command{Version: commandVersion4, Op: OpUpdate, Name: name, LeaseID: lease, Value: value}
}

// A value comes with a version 4 acquire, the holder replaces it with an
// update (token kept, index moved), and anyone else's update is
// not_holder.
func TestValueAndUpdate(t *testing.T) {
	l := newLog(t).at(0)
	c := acquire("a", "L1", 1000)
	c.Version, c.Value = commandVersion4, "host-1:80"
	if r := l.apply(c); r.Status != StatusOK || r.Lock.Value != "host-1:80" { // 1
		t.Fatalf("acquire with a value: %+v", r)
	}
	r := l.apply(update("a", "L1", "host-2:80")) // 2
	if r.Status != StatusOK || r.Lock.Value != "host-2:80" || r.Lock.Token != 1 || r.Lock.Index != 2 || len(r.Changed) != 1 {
		t.Fatalf("update: %+v", r)
	}
	if got, _ := l.m.Get("a"); got.Value != "host-2:80" || got.Index != 2 {
		t.Fatalf("Get after update: %+v", got)
	}
	if r := l.apply(update("a", "L1", "host-2:80")); r.Status != StatusOK || r.Lock.Index != 2 || len(r.Changed) != 0 { // 3
		t.Fatalf("an update to the same value changed the lock: %+v", r)
	}
	if r := l.apply(update("a", "L2", "x")); r.Status != StatusNotHolder {
		t.Fatalf("update by another lease: %v", r.Status)
	}
	if r := l.apply(update("free", "L1", "x")); r.Status != StatusNotHolder {
		t.Fatalf("update of a free lock: %v", r.Status)
	}
	// A version 3 retry by the holder keeps the value; a version 4 one sets it.
	l.apply(acquire("a", "L1", 1000))
	if got, _ := l.m.Get("a"); got.Value != "host-2:80" {
		t.Fatalf("v3 retry changed the value: %+v", got)
	}
	c.Value = "host-3:80"
	l.apply(c)
	if got, _ := l.m.Get("a"); got.Value != "host-3:80" || got.Index != l.index {
		t.Fatalf("v4 retry: %+v", got)
	}
	// The value survives a snapshot.
	restored := New()
	if err := restored.Restore(bytes.NewReader(snapshotBytes(t, l.m))); err != nil {
		t.Fatal(err)
	}
	if got, _ := restored.Get("a"); got.Value != "host-3:80" {
		t.Fatalf("after restore: %+v", got)
	}
}

// Version 4 carries the value; older versions cannot carry one or an
// update, and Encode refuses rather than drop it. Builds that read up to 3
// refuse update, so this one does in older versions too.
func TestVersion4Format(t *testing.T) {
	c := Command{Version: commandVersion4, Op: OpAcquire, StampTerm: 2, Name: "a", LeaseID: "L", TTL: 1000, Value: "v"}
	got, err := DecodeCommand(c.Encode(nil))
	if err != nil || got != c {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, tc := range []struct {
		c    Command
		min  uint8
		fits uint8
	}{
		{Command{Op: OpAcquire}, 1, 1},
		{Command{Op: OpAcquire, Value: "v"}, 4, 4},
		{Command{Op: OpUpdate}, 4, 4},
		{Command{Op: OpForceRelease}, 3, 3},
	} {
		if MinVersion(tc.c) != tc.min || !Fits(tc.c, tc.fits) || Fits(tc.c, tc.fits-1) && tc.fits > 1 {
			t.Errorf("%v value %q: MinVersion %d, Fits(%d) %v, Fits(%d) %v", tc.c.Op, tc.c.Value, MinVersion(tc.c), tc.fits, Fits(tc.c, tc.fits), tc.fits-1, Fits(tc.c, tc.fits-1))
		}
	}
	for _, bad := range []Command{{Version: 3, Op: OpAcquire, Value: "v"}, {Version: 3, Op: OpUpdate}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Encode of %+v did not panic", bad)
				}
			}()
			bad.Encode(nil)
		}()
	}
	// An update in a version 3 envelope is refused as unknown.
	data := (&Command{Version: 4, Op: OpUpdate, StampTerm: 1, Name: "a", LeaseID: "L"}).Encode(nil)
	data[0] = 3
	if _, err := DecodeCommand(data); !errors.Is(err, ErrUnknownOp) {
		t.Fatalf("update in version 3: %v", err)
	}
}
