package fsm

import (
	"bytes"
	"reflect"
	"strconv"
	"testing"
)

const ms = int64(1e6) // nanoseconds per millisecond, for stamps

// log drives a Machine the way Raft would: consecutive indexes, an explicit
// term and the leader's stamp for each entry.
type log struct {
	t     *testing.T
	m     *Machine
	index uint64
	term  uint64
	stamp int64
}

func newLog(t *testing.T) *log {
	return &log{t: t, m: New(), term: 1}
}

// at sets the leader's stamp (ms) for the next entries.
func (l *log) at(stampMs int64) *log { l.stamp = stampMs * ms; return l }

func (l *log) apply(c Command) Result {
	l.t.Helper()
	l.index++
	c.Stamp = l.stamp
	if c.Version >= commandVersion2 && c.StampTerm == 0 {
		c.StampTerm = l.term // stamped by this term's leader
	}
	r, err := l.m.Apply(l.index, l.term, c.Encode(nil))
	if err != nil {
		l.t.Fatalf("apply %v: %v", c.Op, err)
	}
	return r
}

func acquire(name, lease string, ttlMs int64) Command {
	return Command{Op: OpAcquire, Name: name, Owner: "owner-" + lease, LeaseID: lease, TTL: ttlMs}
}
func renew(name, lease string, ttlMs int64) Command {
	return Command{Op: OpRenew, Name: name, LeaseID: lease, TTL: ttlMs}
}
func release(name, lease string) Command {
	return Command{Op: OpRelease, Name: name, LeaseID: lease}
}
func tick() Command { return Command{Op: OpTick} }

func TestCommands(t *testing.T) {
	type step struct {
		cmd    Command
		status Status
		token  uint64 // expected token on OK, or holder's token on Held; 0 = don't check
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"acquire free lock gets its index as token", []step{
			{acquire("a", "L1", 1000), StatusOK, 1},
		}},
		{"second lease is refused and shown the holder", []step{
			{acquire("a", "L1", 1000), StatusOK, 1},
			{acquire("a", "L2", 1000), StatusHeld, 1},
		}},
		{"acquire with the holding lease is idempotent", []step{
			{acquire("a", "L1", 1000), StatusOK, 1},
			{acquire("a", "L1", 1000), StatusOK, 1},
		}},
		{"locks are independent", []step{
			{acquire("a", "L1", 1000), StatusOK, 1},
			{acquire("b", "L2", 1000), StatusOK, 2},
		}},
		{"renew by holder keeps token", []step{
			{acquire("a", "L1", 1000), StatusOK, 1},
			{renew("a", "L1", 2000), StatusOK, 1},
		}},
		{"renew by another lease", []step{
			{acquire("a", "L1", 1000), StatusOK, 1},
			{renew("a", "L2", 1000), StatusNotHolder, 0},
		}},
		{"renew of a free lock", []step{
			{renew("a", "L1", 1000), StatusNotHolder, 0},
		}},
		{"release frees and re-acquire gets a larger token", []step{
			{acquire("a", "L1", 1000), StatusOK, 1},
			{release("a", "L1"), StatusOK, 0},
			{acquire("a", "L2", 1000), StatusOK, 3},
		}},
		{"release never frees someone else's lock", []step{
			{acquire("a", "L1", 1000), StatusOK, 1},
			{release("a", "L2"), StatusNotHolder, 0},
			{acquire("a", "L3", 1000), StatusHeld, 1},
		}},
		{"release of a free lock", []step{
			{release("a", "L1"), StatusNotHolder, 0},
		}},
		{"released lease cannot renew", []step{
			{acquire("a", "L1", 1000), StatusOK, 1},
			{release("a", "L1"), StatusOK, 0},
			{renew("a", "L1", 1000), StatusNotHolder, 0},
		}},
		{"meaningless commands are invalid", []step{
			{acquire("", "L1", 1000), StatusInvalid, 0},
			{acquire("a", "", 1000), StatusInvalid, 0},
			{acquire("a", "L1", 0), StatusInvalid, 0},
			{renew("a", "L1", -1), StatusInvalid, 0},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newLog(t)
			for i, s := range tc.steps {
				r := l.apply(s.cmd)
				if r.Status != s.status {
					t.Fatalf("step %d (%v): status %v, want %v", i, s.cmd.Op, r.Status, s.status)
				}
				got := r.Lock.Token
				if r.Status == StatusHeld {
					got = r.Holder.Token
				}
				if s.token != 0 && got != s.token {
					t.Fatalf("step %d (%v): token %d, want %d", i, s.cmd.Op, got, s.token)
				}
			}
		})
	}
}

func TestTokensStrictlyIncreaseAcrossGrants(t *testing.T) {
	l := newLog(t)
	var last uint64
	for i := 0; i < 50; i++ {
		l.apply(acquire("other", "X", 1000)) // unrelated entries interleave
		r := l.apply(acquire("a", "L", 1000))
		if r.Status != StatusOK || r.Lock.Token <= last {
			t.Fatalf("grant %d: status %v token %d after %d", i, r.Status, r.Lock.Token, last)
		}
		last = r.Lock.Token
		if r := l.apply(release("a", "L")); r.Status != StatusOK {
			t.Fatalf("release %d: %v", i, r.Status)
		}
	}
}

func TestExpiryAfterTTLAndNotBefore(t *testing.T) {
	l := newLog(t).at(100)
	l.apply(acquire("a", "L1", 1000))
	l.at(1099).apply(tick())
	if _, ok := l.m.Get("a"); !ok {
		t.Fatal("lease expired before its TTL")
	}
	if r := l.apply(acquire("a", "L2", 1000)); r.Status != StatusHeld {
		t.Fatalf("acquire before expiry: %v", r.Status)
	}
	r := l.at(1100).apply(tick())
	if _, ok := l.m.Get("a"); ok {
		t.Fatal("lease still held at its deadline")
	}
	if !reflect.DeepEqual(r.Freed, []string{"a"}) || r.Expired != 1 {
		t.Fatalf("freed %v expired %d, want [a] 1", r.Freed, r.Expired)
	}
}

func TestAcquireAfterDeadlineTakesLockInSameEntry(t *testing.T) {
	l := newLog(t).at(0)
	l.apply(acquire("a", "L1", 1000))
	r := l.at(5000).apply(acquire("a", "L2", 1000))
	if r.Status != StatusOK || r.Lock.LeaseID != "L2" || r.Lock.Token != 2 {
		t.Fatalf("got %+v", r)
	}
	if !reflect.DeepEqual(r.Freed, []string{"a"}) {
		t.Fatalf("freed %v", r.Freed)
	}
}

func TestRenewPushesDeadline(t *testing.T) {
	l := newLog(t).at(0)
	l.apply(acquire("a", "L1", 1000))
	l.at(800).apply(renew("a", "L1", 0)) // TTL 0 keeps the current TTL
	l.at(1700).apply(tick())
	if _, ok := l.m.Get("a"); !ok {
		t.Fatal("renewed lease expired at the old deadline")
	}
	l.at(1800).apply(tick())
	if _, ok := l.m.Get("a"); ok {
		t.Fatal("renewed lease outlived renew time + TTL")
	}
}

func TestIdempotentAcquireRefreshesDeadline(t *testing.T) {
	l := newLog(t).at(0)
	l.apply(acquire("a", "L1", 1000))
	l.at(900).apply(acquire("a", "L1", 1000))
	l.at(1500).apply(tick())
	if lk, ok := l.m.Get("a"); !ok || lk.Token != 1 {
		t.Fatalf("retried acquire did not refresh the lease: %+v %v", lk, ok)
	}
}

func TestLeaderChangeNeitherRestartsNorShortensTTL(t *testing.T) {
	l := newLog(t).at(0)
	l.apply(acquire("a", "L1", 1000))
	l.at(600).apply(tick()) // 600 ms pass under leader 1

	// Leader 2 starts its own monotonic clock far ahead (or behind): the
	// gap between terms adds nothing, and its first stamp is its base.
	l.term = 2
	l.at(1_000_000).apply(tick())
	l.at(1_000_399).apply(tick())
	if _, ok := l.m.Get("a"); !ok {
		t.Fatal("leader change shortened the lease")
	}
	l.at(1_000_400).apply(tick()) // 600 + 400 = 1000 ms measured
	if _, ok := l.m.Get("a"); ok {
		t.Fatal("leader change restarted the TTL instead of continuing it")
	}

	// A new leader whose clock reads lower than the old one's is no different.
	l.apply(acquire("b", "L2", 1000))
	l.term = 3
	l.at(5).apply(tick())
	l.at(1004).apply(tick())
	if _, ok := l.m.Get("b"); !ok {
		t.Fatal("a leader with a lower clock shortened the lease")
	}
}

func TestStampsOutOfOrderNeverMoveClockBack(t *testing.T) {
	l := newLog(t).at(1000)
	l.apply(tick())
	l.at(500).apply(acquire("a", "L1", 1000)) // stamped earlier, appended later
	if now := l.m.Clock().Now; now != 0 {
		t.Fatalf("clock moved to %d on an older stamp", now)
	}
	l.at(1999).apply(tick())
	if _, ok := l.m.Get("a"); !ok {
		t.Fatal("lease measured from its stale stamp, not from the clock at apply")
	}
}

func TestLockDelayAfterExpiryNotAfterRelease(t *testing.T) {
	l := newLog(t).at(0)
	c := acquire("a", "L1", 1000)
	c.LockDelay = 500
	l.apply(c)
	if r := l.at(1000).apply(tick()); r.Expired != 1 || len(r.Freed) != 0 {
		t.Fatalf("expiry into lock-delay: expired %d freed %v", r.Expired, r.Freed)
	}
	r := l.at(1200).apply(acquire("a", "L2", 1000))
	if r.Status != StatusHeld || r.Holder.LeaseID != "L1" || r.Retry != 300 {
		t.Fatalf("during lock-delay: %+v", r)
	}
	if _, ok := l.m.Get("a"); ok {
		t.Fatal("a lock in lock-delay reads as held")
	}
	r = l.at(1500).apply(tick())
	if !reflect.DeepEqual(r.Freed, []string{"a"}) || r.Expired != 0 {
		t.Fatalf("end of lock-delay freed %v", r.Freed)
	}
	if r := l.apply(acquire("a", "L2", 1000)); r.Status != StatusOK {
		t.Fatalf("after lock-delay: %v", r.Status)
	}

	c = acquire("b", "L3", 1000)
	c.LockDelay = 500
	l.apply(c)
	l.apply(release("b", "L3"))
	if r := l.apply(acquire("b", "L4", 1000)); r.Status != StatusOK {
		t.Fatalf("lock-delay applied after a release: %+v", r)
	}
}

// Two replicas fed the same log free the same locks at the same indexes and
// end in byte-identical snapshots.
func TestReplicasExpireAtSameIndex(t *testing.T) {
	a, b := newLog(t), newLog(t)
	type freedAt struct {
		index uint64
		names []string
	}
	var fa, fb []freedAt
	for i := int64(0); i < 200; i++ {
		c := acquire(string(rune('a'+i%7)), string(rune('A'+i%5))+"lease", 50+i%300)
		if i%3 == 0 {
			c = tick()
		}
		ra := a.at(i * 17).apply(c)
		rb := b.at(i * 17).apply(c)
		if len(ra.Freed) > 0 {
			fa = append(fa, freedAt{a.index, ra.Freed})
		}
		if len(rb.Freed) > 0 {
			fb = append(fb, freedAt{b.index, rb.Freed})
		}
	}
	if len(fa) == 0 || !reflect.DeepEqual(fa, fb) {
		t.Fatalf("replicas diverged or nothing expired:\n%v\n%v", fa, fb)
	}
	if !bytes.Equal(snapshotBytes(t, a.m), snapshotBytes(t, b.m)) {
		t.Fatal("replica snapshots differ")
	}
}

func TestNodeTable(t *testing.T) {
	l := newLog(t)
	l.apply(Command{Op: OpSetNode, NodeID: "n1", NodeAddr: "127.0.0.1:8001"})
	l.apply(Command{Op: OpSetNode, NodeID: "n2", NodeAddr: "127.0.0.1:8002"})
	l.apply(Command{Op: OpRemoveNode, NodeID: "n1"})
	if got := l.m.Nodes(); !reflect.DeepEqual(got, map[string]string{"n2": "127.0.0.1:8002"}) {
		t.Fatalf("nodes %v", got)
	}
	if r := l.apply(Command{Op: OpSetNode}); r.Status != StatusInvalid {
		t.Fatalf("set node without id: %v", r.Status)
	}
}

func TestListByPrefixSortedAndLimited(t *testing.T) {
	l := newLog(t)
	for _, n := range []string{"orders/3", "orders/1", "jobs/1", "orders/2"} {
		l.apply(acquire(n, "L-"+n, 1000))
	}
	got, truncated := l.m.List("orders/", 2)
	if len(got) != 2 || got[0].Name != "orders/1" || got[1].Name != "orders/2" || !truncated {
		t.Fatalf("list: %+v truncated=%v", got, truncated)
	}
	all, truncated := l.m.List("", 0)
	if len(all) != 4 || truncated {
		t.Fatalf("list all: %d truncated=%v", len(all), truncated)
	}
}

// One entry settles at most MaxExpiriesPerEntry timers, earliest first; a
// command on a due lock settles that lock whatever the cap left.
func TestExpiriesPerEntryAreBounded(t *testing.T) {
	l := newLog(t).at(0)
	const total = MaxExpiriesPerEntry*2 + 100
	for i := 0; i < total-1; i++ {
		l.apply(acquire("due/"+strconv.Itoa(i), "L", int64(1000+i%10)))
	}
	l.apply(acquire("latest", "L", 1500)) // due last: the cap leaves it for later
	r := l.at(5000).apply(acquire("latest", "other", 1000))
	if r.Status != StatusOK {
		t.Fatalf("acquire of a due lock beyond the cap: %v", r.Status)
	}
	if r.Expired != MaxExpiriesPerEntry+1 {
		t.Fatalf("expired %d in one entry, want %d (the cap, plus the lock acted on)", r.Expired, MaxExpiriesPerEntry+1)
	}
	r = l.apply(tick())
	if r.Expired != MaxExpiriesPerEntry || len(r.Freed) != MaxExpiriesPerEntry {
		t.Fatalf("second entry: expired %d freed %d", r.Expired, len(r.Freed))
	}
	r = l.apply(tick())
	if want := total - 2*MaxExpiriesPerEntry - 1; r.Expired != want {
		t.Fatalf("third entry: expired %d, want %d", r.Expired, want)
	}
	if held := l.m.HeldCount(); held != 1 {
		t.Fatalf("%d leases held, want only the new one", held)
	}
	if _, due := l.m.NextTimer(); !due {
		t.Fatal("the new lease has no timer")
	}
}

// Lookup and ListIndexed read a lock's state and its index at one point of
// the log: acquires land at odd indexes and releases at even
// ones, so a held answer must carry an odd index and a free one an even
// index, however the reads interleave with the applies.
func TestLookupPairsStateWithItsIndex(t *testing.T) {
	m := New()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint64(1); i < 4000; i += 2 {
			m.ApplyCommand(i, 1, Command{Op: OpAcquire, Name: "a", LeaseID: "la", TTL: 60_000})
			m.ApplyCommand(i+1, 1, Command{Op: OpRelease, Name: "a", LeaseID: "la"})
		}
	}()
	check := func(held bool, index uint64) {
		if index != 0 && held != (index%2 == 1) {
			t.Fatalf("held=%v with index %d: the state and the index come from different points of the log", held, index)
		}
	}
	for {
		select {
		case <-done:
			return
		default:
		}
		_, held, index := m.Lookup("a")
		check(held, index)
		locks, _, hi := m.ListIndexed("", 0)
		check(len(locks) == 1, hi)
	}
}
