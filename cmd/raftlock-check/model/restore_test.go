package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/fsm"
)

// backupOf is a backup file of a state where each lease in leases holds
// lock "L" (at most one; none: nobody holds anything).
func backupOf(t *testing.T, leases ...string) []byte {
	t.Helper()
	m := fsm.New()
	for i, l := range leases {
		m.ApplyCommand(uint64(i+1), 1, fsm.Command{Version: 2, StampTerm: 1, Op: fsm.OpAcquire, Name: "L", Owner: "o", LeaseID: l, TTL: 600_000})
	}
	if len(leases) == 0 {
		m.ApplyCommand(1, 1, fsm.Command{Version: 2, StampTerm: 1, Op: fsm.OpAcquire, Name: "other", Owner: "o", LeaseID: "lease-000009-0123456789", TTL: 600_000})
		m.ApplyCommand(2, 1, fsm.Command{Version: 2, StampTerm: 1, Op: fsm.OpRelease, Name: "other", LeaseID: "lease-000009-0123456789"})
	}
	var snap bytes.Buffer
	if _, err := m.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	b := []byte("RAFTLOCK-BACKUP\n")
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint64(b, m.Clock().Index)
	b = binary.BigEndian.AppendUint64(b, 1)
	b = binary.BigEndian.AppendUint64(b, uint64(snap.Len()))
	b = append(b, snap.Bytes()...)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

func readOp(id string, client int, call, ret int64, out string, index uint64) history.Op {
	o := op(id, client, history.Read, "", 0, call, ret, out, 0)
	if out == history.OK {
		o.Token = index
	}
	o.Index = index
	return o
}

// A restore of a backup saved before A's grant rolls A back: B is granted
// while A's client still trusts A. Judged as one history that is an
// overlap (a) and not linearizable (e); judged per epoch it is neither. A
// read in flight across the restore (it showed A) is left out after it.
func TestEpochsRollBack(t *testing.T) {
	restores := []Restore{{Saved: 20 * ms, Sent: 200 * ms, Answered: 250 * ms, Backup: backupOf(t)}}
	ops := []history.Op{
		op("1", 1, history.Acquire, "A", 10_000, 100, 110, history.OK, 50),
		readOp("2", 3, 190, 255, history.OK, 50),
		op("3", 2, history.Acquire, "B", 10_000, 300, 310, history.OK, 60),
		readOp("4", 3, 320, 330, history.OK, 60),
	}
	if vs := MutualExclusion(ops, 0.02); len(vs) == 0 {
		t.Fatal("as one history the rollback should overlap (a): the test proves nothing")
	}
	if r := lin(t, ops); r != porcupine.Illegal {
		t.Fatalf("as one history: %v, want Illegal", r)
	}
	eps, err := Epochs(ops, restores)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 || len(eps[0].Left) != 0 || len(eps[1].Left) != 0 {
		t.Fatalf("epochs %+v", eps)
	}
	for i, e := range eps {
		if vs := MutualExclusion(e.Ops, 0.02); len(vs) > 0 {
			t.Errorf("epoch %d: %v", i, vs)
		}
		if r := lin(t, e.Ops); r != porcupine.Ok {
			t.Errorf("epoch %d: %v, want Ok", i, r)
		}
		if vs := Tokens(e.Ops); len(vs) > 0 {
			t.Errorf("epoch %d: %v", i, vs)
		}
	}
	for _, o := range eps[1].Ops {
		if o.ID == "1" || o.ID == "2" {
			t.Errorf("epoch 1 holds %s, answered before the restore or a read across it", o)
		}
	}
	if vs := RestoreFencing(ops, restores); len(vs) > 0 {
		t.Errorf("(k) on a correct history: %v", vs)
	}
}

// An acquire in flight across a restore may have applied on either side:
// in both epochs it is an unknown outcome, which proves no holding.
func TestEpochsOpAcrossRestoreIsUnknown(t *testing.T) {
	restores := []Restore{{Sent: 200 * ms, Answered: 250 * ms, Backup: backupOf(t)}}
	ops := []history.Op{op("1", 1, history.Acquire, "A", 10_000, 190, 260, history.OK, 50)}
	eps, err := Epochs(ops, restores)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range eps {
		if len(e.Ops) != 1 || e.Ops[0].Outcome != history.Unknown || e.Ops[0].Token != 0 {
			t.Errorf("epoch %d: %+v, want the acquire as an unknown outcome", i, e.Ops)
		}
	}
}

// A lock the backup holds comes back held by a lease the epoch after the
// restore never saw granted: it is left out of that epoch.
func TestEpochsLeaveOutWhatTheBackupHolds(t *testing.T) {
	const a = "lease-000001-0123456789"
	restores := []Restore{{Sent: 200 * ms, Answered: 250 * ms, Backup: backupOf(t, a)}}
	ops := []history.Op{
		op("1", 1, history.Acquire, a, 10_000, 0, 10, history.OK, 1),
		op("2", 2, history.Acquire, "B", 10_000, 300, 310, history.Held, 1),
		op("3", 1, history.Renew, a, 10_000, 400, 410, history.OK, 1),
	}
	eps, err := Epochs(ops, restores)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(eps[1].Left, ","); got != "lock:L" || len(eps[1].Ops) != 0 {
		t.Fatalf("epoch 1 left out %q, kept %v; want lock:L and nothing", got, eps[1].Ops)
	}
	// A's renew answers its old token: a retry of a restored lease, not a
	// new grant.
	if vs := RestoreFencing(ops, restores); len(vs) > 0 {
		t.Errorf("(k): %v", vs)
	}
}

// (k) sees what restore-lowers-index does: a lock granted while the
// restore ran reads a lower index after it, and a new grant after a restore
// whose token is not above one acknowledged before.
func TestRestoreFencingSeesIndexesGoDown(t *testing.T) {
	restores := []Restore{{Sent: 200 * ms, Answered: 250 * ms}}
	ops := []history.Op{
		op("1", 1, history.Acquire, "A", 10_000, 100, 110, history.OK, 50),
		op("2", 2, history.Acquire, "B", 10_000, 210, 220, history.OK, 119), // lands during the restore
		readOp("3", 3, 260, 270, history.OK, 99),                            // rolled back to the raised index
		readOp("4", 3, 280, 290, history.Free, 50),                          // not above a grant before the restore
		op("5", 4, history.Acquire, "C", 10_000, 300, 310, history.OK, 40),
	}
	vs := RestoreFencing(ops, restores)
	if len(vs) != 3 {
		t.Fatalf("%d violations, want 3 (two reads, one token):\n%v", len(vs), vs)
	}
	for _, want := range []string{"read 3 ", "read 4 ", "new lease C"} {
		found := false
		for _, v := range vs {
			found = found || strings.Contains(v.Detail, want)
		}
		if !found {
			t.Errorf("no violation names %q: %v", want, vs)
		}
	}
	// A restore that never answered promises nothing checkable.
	restores[0].Answered = MaxTime
	if vs := RestoreFencing(ops, restores); len(vs) > 0 {
		t.Errorf("unanswered restore: %v", vs)
	}
}

// A lock the backup held is judged again from the first exclusive grant of
// a new lease after the restore: every restored holder is gone by then.
// What was answered before that grant answered is left out; what was in
// flight then may have taken effect after it, so it is an unknown outcome.
func TestEpochsTakeBackALockOnceFreed(t *testing.T) {
	const a = "lease-000001-0123456789"
	restores := []Restore{{Sent: 200 * ms, Answered: 250 * ms, Backup: backupOf(t, a)}}
	ops := []history.Op{
		op("1", 1, history.Acquire, a, 10_000, 0, 10, history.OK, 1),
		op("2", 2, history.Acquire, "B", 10_000, 300, 310, history.Held, 1), // the restored holder
		op("3", 1, history.Release, a, 0, 400, 410, history.OK, 0),
		op("4", 2, history.Acquire, "B", 10_000, 500, 510, history.OK, 90), // B is new: the lock is free again
		op("5", 3, history.Acquire, "C", 10_000, 505, 600, history.Held, 90),
		readOp("6", 3, 620, 630, history.OK, 90),
		op("7", 2, history.Release, "B", 0, 700, 710, history.OK, 0),
		op("8", 3, history.Acquire, "C", 10_000, 720, 730, history.OK, 95),
	}
	eps, err := Epochs(ops, restores)
	if err != nil {
		t.Fatal(err)
	}
	e := eps[1]
	if e.From["lock:L"] != 510*ms {
		t.Fatalf("lock L judged from %d, want the answer of op 4 (%d)", e.From["lock:L"], 510*ms)
	}
	var got []string
	for _, o := range e.Ops {
		got = append(got, o.ID+":"+o.Outcome)
	}
	if want := "4:ok,5:unknown,6:ok,7:ok,8:ok"; strings.Join(got, ",") != want {
		t.Fatalf("epoch 1 ops %s, want %s", strings.Join(got, ","), want)
	}
	if r := lin(t, e.Ops); r != porcupine.Ok {
		t.Errorf("epoch 1: %v, want Ok", r)
	}
	if vs := MutualExclusion(e.Ops, 0.02); len(vs) > 0 {
		t.Errorf("epoch 1: %v", vs)
	}
	// A grant that took longer than half its TTL to answer might have run
	// out before it was answered: it proves nothing; the next one does.
	ops[3].TTLMs = 15
	if eps, _ := Epochs(ops, restores); eps[1].From["lock:L"] != 730*ms || len(eps[1].Ops) != 1 || eps[1].Ops[0].ID != "8" {
		t.Errorf("with a slow grant: L judged from %d with %v, want from op 8 alone", eps[1].From["lock:L"], eps[1].Ops)
	}
}

// The index promise is global: after a restore a read of any lock shows an
// index above everything read or granted, on any lock, before the restore
// was sent. What was answered while it ran may lie past the install, above
// a lock nobody wrote since: that is compared per lock only.
func TestRestoreFencingIndexesAcrossLocks(t *testing.T) {
	restores := []Restore{{Sent: 200 * ms, Answered: 250 * ms}}
	on := func(o history.Op, name string) history.Op {
		o.Name = name
		return o
	}
	ops := []history.Op{
		op("1", 1, history.Acquire, "A", 10_000, 100, 110, history.OK, 150),          // on L, before the send
		on(op("2", 2, history.Acquire, "B", 10_000, 240, 245, history.OK, 300), "Y"), // past the install
		on(readOp("3", 3, 260, 270, history.Free, 260), "X"),                         // above 150: fine
	}
	if vs := RestoreFencing(ops, restores); len(vs) > 0 {
		t.Fatalf("correct history: %v", vs)
	}
	ops = append(ops, on(readOp("4", 3, 280, 290, history.Free, 150), "M")) // not above L's 150
	vs := RestoreFencing(ops, restores)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, `read 4 `) || !strings.Contains(vs[0].Detail, `on "L"`) {
		t.Fatalf("want one violation naming read 4 and lock L: %v", vs)
	}
}

// A restore whose leader crashed before replicating it (Maybe) may not have
// taken effect: A, granted before it, still holds after it settled, so B is
// refused and a read shows A at its old index. Judged as a restore that
// took effect (the backup, saved before A's grant, holds nothing) that is
// not linearizable (e) and a read not above an index answered before (k);
// as one that may not have, the epoch after it leaves the lock out until a
// new lease takes it, and (k) judges nothing.
func TestEpochsMaybeRestoreNotTaken(t *testing.T) {
	ops := []history.Op{
		op("1", 1, history.Acquire, "A", 10_000, 100, 110, history.OK, 50),
		readOp("2", 3, 150, 160, history.OK, 50),
		op("3", 2, history.Acquire, "B", 10_000, 300, 310, history.Held, 50),
		readOp("4", 3, 320, 330, history.OK, 50),
	}
	taken := []Restore{{Saved: 20 * ms, Sent: 200 * ms, Answered: 250 * ms, Backup: backupOf(t)}}
	eps, err := Epochs(ops, taken)
	if err != nil {
		t.Fatal(err)
	}
	if r := lin(t, eps[1].Ops); r != porcupine.Illegal {
		t.Fatalf("as a restore that took effect: %v, want Illegal: the test proves nothing", r)
	}
	if vs := RestoreFencing(ops, taken); len(vs) == 0 {
		t.Fatal("as a restore that took effect (k) should fail: the test proves nothing")
	}
	maybe := []Restore{{Saved: 20 * ms, Sent: 200 * ms, Answered: 250 * ms, Backup: backupOf(t), Maybe: true}}
	eps, err = Epochs(ops, maybe)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 || strings.Join(eps[1].Left, ",") != "lock:L" {
		t.Fatalf("epochs %+v, want L left out after the restore", eps)
	}
	for i, e := range eps {
		if len(e.Ops) > 0 {
			if r := lin(t, e.Ops); r != porcupine.Ok {
				t.Errorf("epoch %d: %v, want Ok", i, r)
			}
		}
	}
	if vs := RestoreFencing(ops, maybe); len(vs) > 0 {
		t.Errorf("(k) judged a restore that may not have taken effect: %v", vs)
	}
}

// After a Maybe restore a lock is judged again from the first grant of a
// new lease: a second grant over it while it must hold is still caught.
func TestEpochsMaybeRestoreJudgedAfterNewGrant(t *testing.T) {
	ops := []history.Op{
		op("1", 1, history.Acquire, "A", 10_000, 100, 110, history.OK, 50),
		op("2", 2, history.Acquire, "B", 10_000, 300, 310, history.OK, 70),
		op("3", 3, history.Acquire, "C", 10_000, 400, 410, history.OK, 80),
	}
	maybe := []Restore{{Saved: 20 * ms, Sent: 200 * ms, Answered: 250 * ms, Backup: backupOf(t), Maybe: true}}
	eps, err := Epochs(ops, maybe)
	if err != nil {
		t.Fatal(err)
	}
	if vs := MutualExclusion(eps[1].Ops, 0.02); len(vs) == 0 {
		t.Errorf("C granted over B after the restore settled: no (a) violation in %+v", eps[1])
	}
}
