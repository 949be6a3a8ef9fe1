package raftnode_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

func validBackup(t testing.TB) []byte {
	t.Helper()
	m := fsm.New()
	m.ApplyCommand(7, 2, fsm.Command{Op: fsm.OpAcquire, Name: "a", Owner: "o", LeaseID: leaseA, TTL: 60000, Stamp: 1})
	var snap bytes.Buffer
	if _, err := m.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	if _, err := raftnode.WriteBackup(&file, 7, 2, snap.Bytes()); err != nil {
		t.Fatal(err)
	}
	return file.Bytes()
}

func TestParseBackupRefusesDamagedFiles(t *testing.T) {
	good := validBackup(t)
	info, _, err := raftnode.ParseBackup(good)
	if err != nil || info.Index != 7 || info.Term != 2 || info.Locks != 1 || info.Size != int64(len(good)) {
		t.Fatalf("good file: %+v %v", info, err)
	}
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	// Garbage fsm bytes with a correct checksum: only the fsm decode catches it.
	garbage := func() []byte {
		var f bytes.Buffer
		raftnode.WriteBackup(&f, 7, 2, []byte("RAFTLOCK-SNAP\x01\x00\x00\x00\x00\xff\xff\xff\xff\xff\x7f"))
		return f.Bytes()
	}()
	cases := map[string][]byte{
		"empty":        nil,
		"foreign":      []byte("PK\x03\x04 some zip file, long enough to pass the length check ..............."),
		"bad magic":    flip(0),
		"bad version":  flip(19),
		"bad checksum": flip(len(good) - 40),
		"bad trailer":  flip(len(good) - 1),
		"truncated":    good[:len(good)-10],
		"padded":       append(bytes.Clone(good), 0),
		"garbage fsm":  garbage,
		"header only":  good[:44],
		"index mismatch": func() []byte { // header index differs from the snapshot's
			var snapOnly bytes.Buffer
			_, s, _ := raftnode.ParseBackup(good)
			raftnode.WriteBackup(&snapOnly, 8, 2, s)
			return snapOnly.Bytes()
		}(),
	}
	for name, b := range cases {
		if _, _, err := raftnode.ParseBackup(b); !errors.Is(err, raftnode.ErrBadBackup) {
			t.Errorf("%s: err = %v, want ErrBadBackup", name, err)
		}
	}
}

// A restore through Raft brings back the old holders and tokens on
// every node, and every token granted afterwards exceeds every token granted
// before it; a damaged file is refused and changes nothing.
func TestBackupRestoreKeepsTokensMonotonic(t *testing.T) {
	c := testenv.Start(t, 3)
	leader := c.Leader()
	var before []uint64
	for i := 0; i < 3; i++ {
		status, body := acquire(t, leader, fmt.Sprintf("old/%d", i), "w", fmt.Sprintf("lease-old-%d-0123456789", i), 600000)
		if status != 200 {
			t.Fatalf("acquire: %d %v", status, body)
		}
		before = append(before, token(t, body))
	}
	var file bytes.Buffer
	info, err := leader.Backup(testenv.Context(t, 10*time.Second), &file)
	if err != nil || info.Locks != 3 || info.Index < before[2] {
		t.Fatalf("backup: %+v %v", info, err)
	}
	if _, err := c.Followers()[0].Backup(testenv.Context(t, 10*time.Second), &bytes.Buffer{}); !errors.Is(err, raftnode.ErrNotLeader) {
		t.Fatalf("backup on a follower: %v, want ErrNotLeader", err)
	}
	var maxBefore uint64
	for i := 0; i < 5; i++ {
		status, body := acquire(t, leader, fmt.Sprintf("new/%d", i), "w", fmt.Sprintf("lease-new-%d-0123456789", i), 600000)
		if status != 200 {
			t.Fatalf("acquire: %d %v", status, body)
		}
		maxBefore = max(maxBefore, token(t, body))
	}

	// Refused: a damaged copy changes nothing.
	bad := bytes.Clone(file.Bytes())
	bad[len(bad)/2] ^= 1
	if _, err := leader.RestoreBackupWith(testenv.Context(t, 10*time.Second), bytes.NewReader(bad), raftnode.RestoreOptions{}); !errors.Is(err, raftnode.ErrBadBackup) {
		t.Fatalf("damaged restore: %v, want ErrBadBackup", err)
	}
	if _, ok := leader.Machine().Get("new/4"); !ok {
		t.Fatal("a refused restore changed the state")
	}

	if _, err := leader.RestoreBackupWith(testenv.Context(t, 10*time.Second), bytes.NewReader(file.Bytes()), raftnode.RestoreOptions{}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	for _, n := range c.Nodes {
		testenv.WaitFor(t, 10*time.Second, n.ID+" takes the restore", func() bool {
			_, newer := n.Machine().Get("new/0")
			l, old := n.Machine().Get("old/2")
			return !newer && old && l.Token == before[2]
		})
	}
	status, body := acquire(t, leader, "after", "w", "lease-after-0123456789", 600000)
	if status != 200 {
		t.Fatalf("acquire after restore: %d %v", status, body)
	}
	if tok := token(t, body); tok <= maxBefore {
		t.Fatalf("token after restore %d does not exceed %d, granted before it", tok, maxBefore)
	}
	// The lock taken after the backup is free again; the restored ones held.
	if status, _ := acquire(t, leader, "new/0", "x", "lease-x-0123456789abc", 600000); status != 200 {
		t.Fatalf("new/0 after restore: %d", status)
	}
	if status, _ := acquire(t, leader, "old/0", "x", "lease-x-0123456789abc", 600000); status != 409 {
		t.Fatalf("old/0 after restore: %d, want 409 (restored holder)", status)
	}
	// Linearizable reads work on every node (the machine passed the hole).
	for _, n := range c.Nodes {
		status, body := call(t, "GET", n.URL()+"/v1/locks/old/1", nil)
		if status != 200 {
			t.Fatalf("read on %s after restore: %d %v", n.ID, status, body)
		}
	}
}

// The restored leases keep their remaining time even when the backup was
// taken in the current term: the restore does not add the time since.
func TestRestoreDoesNotShortenLeases(t *testing.T) {
	clk := &testenv.ManualClock{}
	c := testenv.Start(t, 1, testenv.Options{Clock: clk})
	leader := c.Leader()
	if status, body := acquire(t, leader, "l", "w", leaseA, 10000); status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	var file bytes.Buffer
	if _, err := leader.Backup(testenv.Context(t, 10*time.Second), &file); err != nil {
		t.Fatal(err)
	}
	clk.Advance(60 * time.Second) // far past the TTL
	if _, err := leader.RestoreBackupWith(testenv.Context(t, 10*time.Second), bytes.NewReader(file.Bytes()), raftnode.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if status, _ := acquire(t, leader, "l", "x", leaseB, 10000); status != 409 {
		t.Fatalf("restored lease was cut short: acquire by another got %d, want 409", status)
	}
}

// idleClock tells when the leader loop goes idle (waits an hour: no lease).
type idleClock struct {
	*testenv.ManualClock
	idle chan struct{}
}

func (c idleClock) After(d time.Duration) <-chan time.Time {
	if d >= time.Hour {
		select {
		case c.idle <- struct{}{}:
		default:
		}
	}
	return c.ManualClock.After(d)
}

// Restored leases expire on time even when the cluster had none before the
// restore (the leader's tick loop was idle).
func TestRestoredLeasesExpire(t *testing.T) {
	clk := idleClock{&testenv.ManualClock{}, make(chan struct{}, 1)}
	c := testenv.Start(t, 1, testenv.Options{Clock: clk})
	leader := c.Leader()
	status, body := acquire(t, leader, "l", "w", leaseA, 1000)
	if status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	var file bytes.Buffer
	if _, err := leader.Backup(testenv.Context(t, 10*time.Second), &file); err != nil {
		t.Fatal(err)
	}
	if status, _ := call(t, "POST", leader.URL()+"/v1/locks/release", map[string]any{"name": "l", "lease_id": leaseA}); status != 200 {
		t.Fatalf("release: %d", status)
	}
	// Let the loop wake on its last short wait, see no lease and go idle.
	select {
	case <-clk.idle:
	default:
	}
	clk.Advance(time.Second)
	select {
	case <-clk.idle:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader loop did not go idle")
	}
	if _, err := leader.RestoreBackupWith(testenv.Context(t, 10*time.Second), bytes.NewReader(file.Bytes()), raftnode.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the restored lease expires", func() bool {
		clk.Advance(100 * time.Millisecond)
		_, held := leader.Machine().Get("l")
		return !held
	})
}

// After restoring a backup far behind the log (more than AppliedThrough
// scans), with no lease to tick for, linearizable reads still work: the
// restore is followed by a command every replica's machine applies.
func TestReadsAfterRestoreFarBehind(t *testing.T) {
	c := testenv.Start(t, 1)
	leader := c.Leader()
	var file bytes.Buffer
	if _, err := leader.Backup(testenv.Context(t, 10*time.Second), &file); err != nil {
		t.Fatal(err)
	}
	start := leader.Raft().LastIndex()
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for leader.Raft().LastIndex() < start+1200 {
				leader.Apply(testenv.Context(t, 10*time.Second), fsm.Command{Op: fsm.OpRelease, Name: "x", LeaseID: leaseA})
			}
		}()
	}
	wg.Wait()
	if _, err := leader.RestoreBackupWith(testenv.Context(t, 10*time.Second), bytes.NewReader(file.Bytes()), raftnode.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Read(testenv.Context(t, 5*time.Second), false); err != nil {
		t.Fatalf("linearizable read after the restore: %v", err)
	}
}

// An acquire parked on a lock the restore frees is granted at once, not
// when its wait runs out.
func TestRestoreServesParkedAcquires(t *testing.T) {
	c := testenv.Start(t, 1)
	leader := c.Leader()
	var file bytes.Buffer
	if _, err := leader.Backup(testenv.Context(t, 10*time.Second), &file); err != nil {
		t.Fatal(err)
	}
	if status, body := acquire(t, leader, "l", "a", leaseA, 600000); status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	type answer struct {
		status int
		body   map[string]any
	}
	got := make(chan answer, 1)
	go func() { // no t.Fatal off the test goroutine: errors come back as status 0
		b, _ := json.Marshal(map[string]any{"name": "l", "owner": "b", "lease_id": leaseB, "ttl_ms": 600000, "wait_ms": 60000})
		resp, err := http.Post(leader.URL()+"/v1/locks/acquire", "application/json", bytes.NewReader(b))
		if err != nil {
			got <- answer{0, map[string]any{"error": err.Error()}}
			return
		}
		defer resp.Body.Close()
		body := map[string]any{}
		json.NewDecoder(resp.Body).Decode(&body)
		got <- answer{resp.StatusCode, body}
	}()
	testenv.WaitFor(t, 10*time.Second, "b parks", func() bool { return leader.Waiters() == 1 })
	if _, err := leader.RestoreBackupWith(testenv.Context(t, 10*time.Second), bytes.NewReader(file.Bytes()), raftnode.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		if a.status != 200 || a.body["owner"] != "b" {
			t.Fatalf("parked acquire after the restore: %d %v", a.status, a.body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the parked acquire was not served after the restore freed its lock")
	}
}

// A semaphore acquire parked on a semaphore the restore frees is granted at
// once, as a lock's is (TestRestoreServesParkedAcquires). Before, the
// restore woke only the lock queue: the waiter stayed parked until its wait
// ran out, and every acquire that did not wait was answered full by a
// semaphore nobody held, listing no holder.
func TestRestoreServesParkedSemaphoreAcquires(t *testing.T) {
	c, _ := startFormat5(t)
	ctx := testenv.Context(t, time.Minute)
	var backup bytes.Buffer
	if _, err := c.Leader().Backup(ctx, &backup); err != nil { // nobody holds "pool"
		t.Fatal(err)
	}
	one := func(lease string) fsm.Command {
		cmd := semCmd(lease)
		cmd.Limit = 1
		return cmd
	}
	mustApply(t, c, one("h1"), fsm.StatusOK)
	w := parkAcquire(t, c, ctx, one("w1"))
	if _, err := c.Leader().RestoreBackupWith(ctx, bytes.NewReader(backup.Bytes()), raftnode.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-w:
		if a.err != nil || a.r.Status != fsm.StatusOK || a.r.Lock.Slot != 0 {
			t.Fatalf("waiter: %+v, %v", a.r, a.err)
		}
	case <-time.After(15 * time.Second):
		r, err := c.Leader().Acquire(ctx, one("late"), 0)
		t.Fatalf("semaphore free after the restore, but its waiter is still parked after 15 s (%d parked); a non-waiting acquire now gets %v (%v) with %d holders",
			c.Leader().Waiters(), r.Status, err, len(r.Holders))
	}
	// Held by the waiter now: an acquire that does not wait is full and
	// names it.
	if r, err := c.Leader().Acquire(ctx, one("late"), 0); err != nil || r.Status != fsm.StatusFull || len(r.Holders) != 1 || r.Holders[0].Owner != "w1" {
		t.Fatalf("a non-waiting acquire after the grant: %+v, %v", r, err)
	}
}
