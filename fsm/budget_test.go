package fsm

import (
	"fmt"
	"testing"
)

// dueLeases applies n leases on "due/…" that all fall due at 1000 ms.
func dueLeases(l *log, n int) {
	for i := 0; i < n; i++ {
		l.at(0).apply(acquire(fmt.Sprintf("due/%04d", i), fmt.Sprint("D", i), 1000))
	}
}

// From format 5 only ticks settle due timers in bulk (requests-perf16.md
// item 1): a client command settles its own lock and at most
// MaxExpiriesPerCommand other due timers, a tick up to MaxExpiriesPerEntry;
// a format 4 command settles as before.
func TestOnlyTicksSettleInBulkFromFormat5(t *testing.T) {
	const due = 200 // between MaxExpiriesPerCommand and MaxExpiriesPerEntry
	l := newLog(t)
	dueLeases(l, due)
	l.apply(acquire("mine", "M", 500)) // due at 500: before every other
	l.at(1000)
	r := l.apply(v5(acquire("other", "O", 1000)))
	if r.Status != StatusOK || r.Expired != MaxExpiriesPerCommand {
		t.Fatalf("a format 5 acquire: %v, settled %d, want %d", r.Status, r.Expired, MaxExpiriesPerCommand)
	}
	if r := l.apply(v5(acquire("due/0199", "X", 1000))); r.Status != StatusOK || r.Expired != MaxExpiriesPerCommand+1 {
		// Its own lock, the last in the timers' order, whatever the budget.
		t.Fatalf("a format 5 acquire of a due lock: %v, settled %d, want %d", r.Status, r.Expired, MaxExpiriesPerCommand+1)
	}
	if r := l.apply(v5(tick())); r.Expired != due+1-2*MaxExpiriesPerCommand-1 { // "mine" was among the first 64
		t.Fatalf("a format 5 tick settled %d, want the other %d", r.Expired, due+1-2*MaxExpiriesPerCommand-1)
	}

	old := newLog(t)
	dueLeases(old, due)
	old.at(1000)
	c := acquire("other", "O", 1000)
	c.Version = commandVersion4
	if r := old.apply(c); r.Expired != due {
		t.Fatalf("a format 4 acquire settled %d, want all %d as before", r.Expired, due)
	}
}

// A session is one timer counting its leases, never split. A client
// command settles a due session only when it fits the command's budget
// whole (nothing forces progress there: the leader ticks back to back
// while a timer is due, and a tick settles its first due timer whatever
// it costs); a command naming the session, or one of its locks, settles
// it whatever its size.
func TestClientCommandLeavesABigSessionToTicks(t *testing.T) {
	l := newLog(t)
	l.at(0).apply(createSession("big", 1000, 0))
	for i := 0; i < MaxExpiriesPerCommand+1; i++ {
		l.apply(sessionAcquire(fmt.Sprintf("big/%03d", i), fmt.Sprint("B", i), "big"))
	}
	l.apply(createSession("small", 1000, 0))
	l.apply(sessionAcquire("small/0", "S0", "small"))
	l.at(1000)
	if r := l.apply(v5(acquire("other", "O", 1000))); r.Expired != 0 {
		t.Fatalf("a client command settled %d: it split or took a session over its budget", r.Expired)
	}
	if _, ok := l.m.Session("big"); !ok {
		t.Fatal("the big session ended in a client command")
	}
	if r := l.apply(v5(acquire("small/0", "X", 1000))); r.Status != StatusOK || r.Expired != 1 {
		t.Fatalf("an acquire of the small session's lock: %v, settled %d", r.Status, r.Expired)
	}
	if r := l.apply(v5(tick())); r.Expired != MaxExpiriesPerCommand+1 {
		t.Fatalf("the tick settled %d, want the big session's %d", r.Expired, MaxExpiriesPerCommand+1)
	}

	// A small session at the head fits a client command's budget.
	l2 := newLog(t)
	l2.at(0).apply(createSession("a-small", 1000, 0))
	l2.apply(sessionAcquire("s/0", "S0", "a-small"))
	l2.apply(sessionAcquire("s/1", "S1", "a-small"))
	l2.at(1000)
	if r := l2.apply(v5(acquire("other", "O", 1000))); r.Expired != 2 {
		t.Fatalf("a client command settled %d of a 2-lease session", r.Expired)
	}
}
