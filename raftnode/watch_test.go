package raftnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	rlapi "github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

// watchAnswer is one blocking read's answer.
type watchAnswer struct {
	status int
	node   string // X-Raftlock-Node: who answered
	index  uint64 // X-Raftlock-Index
	body   map[string]any
	err    error
}

// watch sends a blocking read in the background.
func watch(url string) <-chan watchAnswer {
	out := make(chan watchAnswer, 1)
	go func() {
		resp, err := http.Get(url)
		if err != nil {
			out <- watchAnswer{err: err}
			return
		}
		defer resp.Body.Close()
		a := watchAnswer{status: resp.StatusCode, node: resp.Header.Get(rlapi.HeaderNode), body: map[string]any{}}
		a.index, a.err = strconv.ParseUint(resp.Header.Get(rlapi.HeaderIndex), 10, 64)
		if err := json.NewDecoder(resp.Body).Decode(&a.body); err != nil && a.err == nil {
			a.err = err
		}
		out <- a
	}()
	return out
}

// watchDeadline is far below the reads' wait_ms (300 s): an answer within
// it was woken, not timed out.
const watchDeadline = 30 * time.Second

func answered(t *testing.T, ch <-chan watchAnswer, what string) watchAnswer {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil || a.status != http.StatusOK {
			t.Fatalf("%s: %d %v %v", what, a.status, a.body, a.err)
		}
		return a
	case <-time.After(watchDeadline):
		t.Fatalf("%s: no answer within %v", what, watchDeadline)
		return watchAnswer{}
	}
}

// parked waits until n has at least k blocking reads parked.
func parked(t *testing.T, n *testenv.Node, k int) {
	t.Helper()
	testenv.WaitFor(t, watchDeadline, fmt.Sprintf("%d reads to park on %s", k, n.ID), func() bool {
		return raftnode.ParkedWatches(n.Node) >= k
	})
}

func lockURL(n *testenv.Node, name string, index uint64, query string) string {
	return fmt.Sprintf("%s/v1/locks/%s?index=%d&wait_ms=300000%s", n.URL(), name, index, query)
}

// A stale blocking read parked on a follower is woken by the follower's own
// apply and answered by the follower; a linearizable one parked on another
// follower is woken the same way and answered through the leader. A read
// with an older index answers at once, one with the current index after its
// wait with the same state.
func TestBlockingReadsOnFollowers(t *testing.T) {
	c := testenv.Start(t, 3)
	f := c.Followers()
	staleCh := watch(lockURL(f[0], "w/a", 0, "&stale=true"))
	linCh := watch(lockURL(f[1], "w/a", 0, ""))
	parked(t, f[0], 1)
	parked(t, f[1], 1)
	st, body := acquire(t, c.Leader(), "w/a", "o", leaseA, 60_000)
	if st != http.StatusOK {
		t.Fatalf("acquire: %d %v", st, body)
	}
	grant := token(t, body)
	stale := answered(t, staleCh, "stale read on a follower")
	if stale.node != f[0].ID || stale.index != grant || stale.body["held"] != true {
		t.Fatalf("stale read answered by %s, index %d, body %v; want %s, %d, held", stale.node, stale.index, stale.body, f[0].ID, grant)
	}
	lin := answered(t, linCh, "linearizable read on a follower")
	if lin.index != grant || lin.body["held"] != true {
		t.Fatalf("linearizable read: index %d body %v, want %d held", lin.index, lin.body, grant)
	}

	// Older index: at once (the wait is 300 s). Current index: after its wait.
	old := answered(t, watch(lockURL(f[0], "w/a", grant-1, "")), "older index")
	if old.index != grant {
		t.Fatalf("older index: %d", old.index)
	}
	same := answered(t, watch(fmt.Sprintf("%s/v1/locks/w/a?index=%d&wait_ms=200", f[1].URL(), grant)), "current index")
	if same.index != grant || same.body["held"] != true {
		t.Fatalf("current index after its wait: %d %v", same.index, same.body)
	}
	if n := raftnode.ParkedWatches(f[1].Node); n != 0 {
		t.Fatalf("%d watches left parked after the wait", n)
	}
}

// A prefix watch answers when a lock under it changes, not before, with
// the highest index under the prefix.
func TestPrefixBlockingRead(t *testing.T) {
	c := testenv.Start(t, 3)
	f := c.Followers()[0]
	ch := watch(f.URL() + "/v1/locks?prefix=jobs/&index=0&wait_ms=300000&stale=true")
	parked(t, f, 1)
	if st, body := acquire(t, c.Leader(), "other", "o", leaseA, 60_000); st != http.StatusOK {
		t.Fatalf("acquire: %d %v", st, body)
	}
	st, body := acquire(t, c.Leader(), "jobs/1", "o", leaseB, 60_000)
	if st != http.StatusOK {
		t.Fatalf("acquire: %d %v", st, body)
	}
	a := answered(t, ch, "prefix watch")
	locks, _ := a.body["locks"].([]any)
	if a.index != token(t, body) || len(locks) != 1 || uint64(a.body["index"].(float64)) != a.index {
		t.Fatalf("prefix watch: index %d body %v, want %d and jobs/1 only", a.index, a.body, token(t, body))
	}
}

// Successive blocking reads through a follower see
// held with value a → value b (update) → renewed with a new TTL → released
// → held by another lease after the leader is killed, each with a higher
// index.
func TestWatchAcrossLeaderKill(t *testing.T) {
	c := testenv.Start(t, 3)
	testenv.WaitFor(t, watchDeadline, "the leader to write command format 4", func() bool {
		return c.Leader().CommandVersion() >= 4
	})
	watcher := c.Followers()[0]
	var last uint64
	next := func(what string, change func()) map[string]any {
		t.Helper()
		ch := watch(lockURL(watcher, "walk/a", last, ""))
		parked(t, watcher, 1)
		change()
		a := answered(t, ch, what)
		if a.index <= last {
			t.Fatalf("%s: index %d, not above %d", what, a.index, last)
		}
		last = a.index
		return a.body
	}
	var grant uint64
	b := next("grant", func() {
		st, body := call(t, "POST", c.Leader().URL()+"/v1/locks/acquire", map[string]any{"name": "walk/a", "owner": "first", "lease_id": leaseA, "ttl_ms": 60_000, "value": "a"})
		if st != http.StatusOK {
			t.Fatalf("acquire: %d %v", st, body)
		}
		grant = token(t, body)
	})
	if b["held"] != true || b["owner"] != "first" || b["value"] != "a" {
		t.Fatalf("after the grant: %v", b)
	}
	b = next("update", func() {
		if st, body := call(t, "POST", c.Followers()[1].URL()+"/v1/locks/update", map[string]any{"name": "walk/a", "lease_id": leaseA, "value": "b"}); st != http.StatusOK {
			t.Fatalf("update: %d %v", st, body)
		}
	})
	if b["value"] != "b" || uint64(b["fencing_token"].(float64)) != grant {
		t.Fatalf("after the update: %v (token %d)", b, grant)
	}
	if st, body := call(t, "POST", c.Leader().URL()+"/v1/locks/update", map[string]any{"name": "walk/a", "lease_id": leaseB, "value": "c"}); st != http.StatusConflict || body["error"] != "not_holder" {
		t.Fatalf("update by another lease: %d %v", st, body)
	}
	b = next("renew with a new TTL", func() {
		if st, body := call(t, "POST", c.Leader().URL()+"/v1/locks/renew", map[string]any{"name": "walk/a", "lease_id": leaseA, "ttl_ms": 30_000}); st != http.StatusOK {
			t.Fatalf("renew: %d %v", st, body)
		}
	})
	if b["ttl_ms"] != float64(30_000) || b["value"] != "b" {
		t.Fatalf("after the renew: %v", b)
	}
	b = next("release", func() {
		if st, body := call(t, "POST", c.Leader().URL()+"/v1/locks/release", map[string]any{"name": "walk/a", "lease_id": leaseA}); st != http.StatusOK {
			t.Fatalf("release: %d %v", st, body)
		}
	})
	if b["held"] != false {
		t.Fatalf("after the release: %v", b)
	}
	old := c.Leader()
	if old == watcher {
		t.Fatal("the watcher leads")
	}
	b = next("grant after a leader kill", func() {
		old.Kill()
		nl := c.WaitForNewLeader(old)
		testenv.WaitFor(t, watchDeadline, "the new leader to grant", func() bool {
			st, _ := acquire(t, nl, "walk/a", "second", leaseB, 60_000)
			return st == http.StatusOK
		})
	})
	if b["held"] != true || b["owner"] != "second" {
		t.Fatalf("after the new grant: %v", b)
	}
}

// While one member reads only command format 3, the leader refuses values
// and updates (503 not_supported_yet) before writing anything.
func TestValueRefusedBeforeEveryMemberReadsFormat4(t *testing.T) {
	c := testenv.Start(t, 3, testenv.Options{Configure: func(cfg *raftnode.Config) {
		inner := cfg.FetchProgress
		cfg.FetchProgress = func(ctx context.Context, id, addr string) (raftnode.Progress, error) {
			p, err := inner(ctx, id, addr)
			if id == "n3" {
				p.CommandVersion = 3
			}
			return p, err
		}
	}})
	leader := c.Leader()
	if leader.ID == "n3" {
		if err := leader.TransferLeadership(testenv.Context(t, 10*time.Second), ""); err != nil {
			t.Fatalf("transfer: %v", err)
		}
		leader = c.WaitForNewLeader(leader)
	}
	testenv.WaitFor(t, watchDeadline, "the leader to write format 3", func() bool {
		return leader.CommandVersion() == 3
	})
	st, body := call(t, "POST", c.Nodes[2].URL()+"/v1/locks/acquire", map[string]any{"name": "v/a", "lease_id": leaseA, "ttl_ms": 60_000, "value": "x"})
	if msg, _ := body["message"].(string); st != http.StatusServiceUnavailable || body["error"] != "not_supported_yet" || !strings.Contains(msg, "command version 4") {
		t.Fatalf("acquire with a value on format 3: %d %v", st, body)
	}
	if st, body := acquire(t, leader, "v/a", "o", leaseA, 60_000); st != http.StatusOK {
		t.Fatalf("acquire without a value: %d %v", st, body)
	}
	st, body = call(t, "POST", leader.URL()+"/v1/locks/update", map[string]any{"name": "v/a", "lease_id": leaseA, "value": "x"})
	if st != http.StatusServiceUnavailable || body["error"] != "not_supported_yet" {
		t.Fatalf("update on format 3: %d %v", st, body)
	}
	if st, body := call(t, "GET", leader.URL()+"/v1/locks/v%2Fa", nil); st != http.StatusOK || body["value"] != nil {
		t.Fatalf("the lock after refused values: %d %v", st, body)
	}
	c.EnsureSame(t)
}
