package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

func TestAcquireBody(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	rec := do(t, s, http.MethodPost, "/v1/locks/acquire",
		`{"name":"orders/89041","owner":"worker-a","ttl_ms":10000,"lease_id":"`+leaseA+`","wait_ms":0,"lock_delay_ms":0}`)
	wantJSON(t, rec, http.StatusOK,
		`{"name":"orders/89041","owner":"worker-a","lease_id":"`+leaseA+`","fencing_token":1,"ttl_ms":10000}`)

	// The handler passes every field the state machine needs, unchanged.
	want := fsm.Command{Op: fsm.OpAcquire, Name: "orders/89041", Owner: "worker-a", LeaseID: leaseA, TTL: 10000}
	if got := f.commands(); len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("store got %+v, want [%+v]", got, want)
	}

	// Retrying with the same lease is idempotent: same token.
	again := do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"orders/89041","owner":"worker-a","ttl_ms":10000,"lease_id":"`+leaseA+`"}`)
	wantJSON(t, again, http.StatusOK,
		`{"name":"orders/89041","owner":"worker-a","lease_id":"`+leaseA+`","fencing_token":1,"ttl_ms":10000}`)
}

func TestAcquirePassesWait(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	mustAcquire(t, s, `{"name":"a","ttl_ms":1000}`)
	// A wait goes to the store only after an admitted try found the lock
	// held (admission.go: a parked acquire holds no admission slot).
	do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000,"wait_ms":1500}`)
	mustAcquire(t, s, `{"name":"b","ttl_ms":1000,"wait_ms":1500}`)
	if got := f.waits; !reflect.DeepEqual(got, []time.Duration{0, 0, 1500 * time.Millisecond, 0}) {
		t.Errorf("store got waits %v, want [0s 0s 1.5s 0s]", got)
	}
}

func TestAcquireWithoutLeaseID(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	l := mustAcquire(t, s, `{"name":"a","ttl_ms":1000,"lock_delay_ms":250}`)
	if err := validLeaseID(l.LeaseID); err != nil {
		t.Errorf("the leader's lease id %q is not one the contract accepts: %v", l.LeaseID, err)
	}
	if got := f.commands()[0]; got.LeaseID != "" || got.Owner != "" || got.LockDelay != 250 {
		t.Errorf("store got %+v: the lease id is the leader's to make", got)
	}
	// The lease id the leader made is the one that holds the lock.
	rec := do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"a","lease_id":"`+l.LeaseID+`"}`)
	wantJSON(t, rec, http.StatusOK, `{"released":true}`)
}

func TestAcquireHeld(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	a := mustAcquire(t, s, `{"name":"orders/89041","owner":"worker-a","ttl_ms":10000,"lease_id":"`+leaseA+`"}`)

	rec := do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"orders/89041","owner":"worker-b","ttl_ms":10000,"lease_id":"`+leaseB+`"}`)
	e := wantError(t, rec, http.StatusConflict, api.CodeHeld, "orders/89041")
	wantJSON(t, rec, http.StatusConflict, fmt.Sprintf(
		`{"error":"held","message":%q,"holder":{"owner":"worker-a","fencing_token":%d}}`, e.Message, a.FencingToken))
	if strings.Contains(rec.Body.String(), leaseA) {
		t.Errorf("a 409 shows the holder's lease id: %s", rec.Body)
	}

	// Without a lease id of its own, the answer is the same.
	rec = do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"orders/89041","ttl_ms":10000}`)
	wantError(t, rec, http.StatusConflict, api.CodeHeld, "worker-a")
}

func TestAcquireHeldDuringLockDelay(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	a := mustAcquire(t, s, `{"name":"a","owner":"worker-a","ttl_ms":1000,"lease_id":"`+leaseA+`","lock_delay_ms":5000}`)

	// The lease expires 1 s later; the lock-delay of 5 s starts then.
	f.advance(1000 * time.Millisecond)
	rec := do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"a","owner":"worker-b","ttl_ms":1000,"lease_id":"`+leaseB+`"}`)
	e := wantError(t, rec, http.StatusConflict, api.CodeHeld, "lock-delay")
	wantJSON(t, rec, http.StatusConflict, fmt.Sprintf(
		`{"error":"held","message":%q,"holder":{"owner":"worker-a","fencing_token":%d},"retry_after_ms":5000}`, e.Message, a.FencingToken))

	// The expired holder cannot renew its way back in.
	rec = do(t, s, http.MethodPost, "/v1/locks/renew", `{"name":"a","lease_id":"`+leaseA+`"}`)
	wantError(t, rec, http.StatusConflict, api.CodeNotHolder, `"a"`)

	// Nor does a read show the lock as held: it is free since the entry
	// that expired it (2).
	rec = do(t, s, http.MethodGet, "/v1/locks/a", "")
	wantJSON(t, rec, http.StatusOK, `{"name":"a","held":false,"index":2}`)

	f.advance(4999 * time.Millisecond)
	rec = do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"a","owner":"worker-b","ttl_ms":1000,"lease_id":"`+leaseB+`"}`)
	var held struct {
		RetryAfterMs int64 `json:"retry_after_ms"`
	}
	json.Unmarshal(rec.Body.Bytes(), &held)
	if rec.Code != http.StatusConflict || held.RetryAfterMs != 1 {
		t.Fatalf("1 ms before the lock-delay ends: status %d, body %s; want 409 with retry_after_ms 1", rec.Code, rec.Body)
	}

	f.advance(time.Millisecond)
	b := mustAcquire(t, s, `{"name":"a","owner":"worker-b","ttl_ms":1000,"lease_id":"`+leaseB+`"}`)
	if b.FencingToken <= a.FencingToken {
		t.Errorf("new grant's token %d is not larger than the old %d", b.FencingToken, a.FencingToken)
	}
}

func TestRenew(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	a := mustAcquire(t, s, `{"name":"a","owner":"worker-a","ttl_ms":10000,"lease_id":"`+leaseA+`"}`)
	tok := a.FencingToken

	// Without ttl_ms the TTL stays; the store is told 0, which means "keep".
	rec := do(t, s, http.MethodPost, "/v1/locks/renew", `{"name":"a","lease_id":"`+leaseA+`"}`)
	wantJSON(t, rec, http.StatusOK, fmt.Sprintf(`{"name":"a","owner":"worker-a","lease_id":"%s","fencing_token":%d,"ttl_ms":10000}`, leaseA, tok))
	if got := f.commands()[1]; got.Op != fsm.OpRenew || got.TTL != 0 || got.LeaseID != leaseA || got.Name != "a" {
		t.Errorf("store got %+v", got)
	}

	rec = do(t, s, http.MethodPost, "/v1/locks/renew", `{"name":"a","lease_id":"`+leaseA+`","ttl_ms":30000}`)
	wantJSON(t, rec, http.StatusOK, fmt.Sprintf(`{"name":"a","owner":"worker-a","lease_id":"%s","fencing_token":%d,"ttl_ms":30000}`, leaseA, tok))

	// The renewal pushed the deadline: 29.999 s later the lease still holds.
	f.advance(29999 * time.Millisecond)
	rec = do(t, s, http.MethodPost, "/v1/locks/renew", `{"name":"a","lease_id":"`+leaseA+`"}`)
	wantJSON(t, rec, http.StatusOK, fmt.Sprintf(`{"name":"a","owner":"worker-a","lease_id":"%s","fencing_token":%d,"ttl_ms":30000}`, leaseA, tok))
}

func TestRenewNotHolder(t *testing.T) {
	notHolder := func(t *testing.T, s http.Handler, body string) {
		t.Helper()
		rec := do(t, s, http.MethodPost, "/v1/locks/renew", body)
		e := wantError(t, rec, http.StatusConflict, api.CodeNotHolder, `"a"`)
		wantJSON(t, rec, http.StatusConflict, fmt.Sprintf(`{"error":"not_holder","message":%q}`, e.Message))
	}
	t.Run("never held", func(t *testing.T) {
		notHolder(t, newServer(newLeader("n1")), `{"name":"a","lease_id":"`+leaseA+`"}`)
	})
	t.Run("another lease holds it", func(t *testing.T) {
		s := newServer(newLeader("n1"))
		mustAcquire(t, s, `{"name":"a","ttl_ms":1000,"lease_id":"`+leaseA+`"}`)
		notHolder(t, s, `{"name":"a","lease_id":"`+leaseB+`","ttl_ms":1000}`)
	})
	t.Run("released", func(t *testing.T) {
		s := newServer(newLeader("n1"))
		mustAcquire(t, s, `{"name":"a","ttl_ms":1000,"lease_id":"`+leaseA+`"}`)
		wantJSON(t, do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"a","lease_id":"`+leaseA+`"}`), http.StatusOK, `{"released":true}`)
		notHolder(t, s, `{"name":"a","lease_id":"`+leaseA+`"}`)
	})
	t.Run("expired", func(t *testing.T) {
		f := newLeader("n1")
		s := newServer(f)
		mustAcquire(t, s, `{"name":"a","ttl_ms":1000,"lease_id":"`+leaseA+`"}`)
		f.advance(1000 * time.Millisecond)
		notHolder(t, s, `{"name":"a","lease_id":"`+leaseA+`"}`)
	})
}

func TestRelease(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	mustAcquire(t, s, `{"name":"a","owner":"worker-a","ttl_ms":1000,"lease_id":"`+leaseA+`"}`)

	// Another lease never frees someone else's lock.
	rec := do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"a","lease_id":"`+leaseB+`"}`)
	e := wantError(t, rec, http.StatusConflict, api.CodeNotHolder, `"a"`)
	wantJSON(t, rec, http.StatusConflict, fmt.Sprintf(`{"error":"not_holder","message":%q}`, e.Message))
	if _, held := f.machine.Get("a"); !held {
		t.Fatal("a release by another lease freed the lock")
	}

	rec = do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"a","lease_id":"`+leaseA+`"}`)
	wantJSON(t, rec, http.StatusOK, `{"released":true}`)
	if got := f.commands()[2]; got != (fsm.Command{Op: fsm.OpRelease, Name: "a", LeaseID: leaseA}) {
		t.Errorf("store got %+v", got)
	}

	// Twice is not_holder: the lease no longer holds it.
	rec = do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"a","lease_id":"`+leaseA+`"}`)
	wantError(t, rec, http.StatusConflict, api.CodeNotHolder, `"a"`)
}

// A result the state machine calls invalid must not turn into a 200.
func TestStoreSaysInvalid(t *testing.T) {
	f := newLeader("n1")
	f.apply = func(_ context.Context, cmd fsm.Command) (fsm.Result, error) {
		return fsm.Result{Status: fsm.StatusInvalid}, nil
	}
	for _, tc := range []struct{ path, body string }{
		{"/v1/locks/acquire", `{"name":"a","ttl_ms":1000}`},
		{"/v1/locks/renew", `{"name":"a","lease_id":"` + leaseA + `"}`},
		{"/v1/locks/release", `{"name":"a","lease_id":"` + leaseA + `"}`},
	} {
		rec := do(t, newServer(f), http.MethodPost, tc.path, tc.body)
		wantError(t, rec, http.StatusBadRequest, api.CodeBadRequest, "")
	}
}

func TestGetLock(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	a := mustAcquire(t, s, `{"name":"orders/89041","owner":"worker-a","ttl_ms":10000,"lease_id":"`+leaseA+`"}`)
	held := fmt.Sprintf(`{"name":"orders/89041","held":true,"owner":"worker-a","fencing_token":%d,"ttl_ms":10000,"index":%[1]d}`, a.FencingToken)

	for _, target := range []string{
		"/v1/locks/orders%2F89041",
		"/v1/locks/orders%2f89041",
		"/v1/locks/orders/89041",
		"/v1/locks/%6Frders%2F89041",
	} {
		t.Run(target, func(t *testing.T) {
			rec := do(t, s, http.MethodGet, target, "")
			wantJSON(t, rec, http.StatusOK, held)
			if strings.Contains(rec.Body.String(), leaseA) || strings.Contains(rec.Body.String(), "lease_id") {
				t.Errorf("GET shows the lease id: %s", rec.Body)
			}
		})
	}

	rec := do(t, s, http.MethodGet, "/v1/locks/orders%2F89042", "")
	wantJSON(t, rec, http.StatusOK, `{"name":"orders/89042","held":false,"index":0}`)

	// Names that need escaping come back as they were taken.
	for _, name := range []string{"a b", "été/✓", "50%", "q?x=1#frag", "a+b", "../x", "a//b"} {
		t.Run(name, func(t *testing.T) {
			l := mustAcquire(t, s, fmt.Sprintf(`{"name":%q,"owner":"w","ttl_ms":1000}`, name))
			rec := do(t, s, http.MethodGet, "/v1/locks/"+url.PathEscape(name), "")
			wantJSON(t, rec, http.StatusOK, fmt.Sprintf(`{"name":%q,"held":true,"owner":"w","fencing_token":%d,"ttl_ms":1000,"index":%[2]d}`, name, l.FencingToken))
		})
	}
}

func TestGetLockStale(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	for _, tc := range []struct {
		query string
		stale bool
	}{{"", false}, {"?stale=false", false}, {"?stale=true", true}, {"?stale=1", true}} {
		f.stales = nil
		rec := do(t, s, http.MethodGet, "/v1/locks/a"+tc.query, "")
		wantJSON(t, rec, http.StatusOK, `{"name":"a","held":false,"index":0}`)
		if len(f.stales) != 1 || f.stales[0] != tc.stale {
			t.Errorf("%q: store read with stale=%v, want [%v]", tc.query, f.stales, tc.stale)
		}
	}
}

func TestGetLockBadRequests(t *testing.T) {
	cases := []struct{ name, target, msg string }{
		{"name too long", "/v1/locks/" + strings.Repeat("n", 513), "name:"},
		{"escaped name too long", "/v1/locks/" + strings.Repeat("%2F", 513), "name:"},
		{"invalid UTF-8", "/v1/locks/a%FFb", "name:"},
		{"control character", "/v1/locks/a%07b", "name:"},
		{"newline", "/v1/locks/a%0Ab", "name:"},
		{"NUL", "/v1/locks/%00", "name:"},
		{"stale not a bool", "/v1/locks/a?stale=yes", "stale:"},
		{"list stale not a bool", "/v1/locks?stale=2", "stale:"},
		{"limit zero", "/v1/locks?limit=0", "limit:"},
		{"limit negative", "/v1/locks?limit=-1", "limit:"},
		{"limit not a number", "/v1/locks?limit=ten", "limit:"},
		{"limit too high", "/v1/locks?limit=10001", "limit:"},
		{"limit overflows", "/v1/locks?limit=99999999999999999999", "limit:"},
		{"prefix too long", "/v1/locks?prefix=" + strings.Repeat("p", 513), "prefix:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newLeader("n1")
			rec := do(t, newServer(f), http.MethodGet, tc.target, "")
			wantError(t, rec, http.StatusBadRequest, api.CodeBadRequest, tc.msg)
			if len(f.stales) != 0 {
				t.Errorf("the store was read for a bad request")
			}
		})
	}
}

func TestListLocks(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)

	wantJSON(t, do(t, s, http.MethodGet, "/v1/locks", ""), http.StatusOK, `{"locks":[],"truncated":false,"index":0}`)

	tokens := map[string]uint64{}
	for _, name := range []string{"b", "a/2", "c", "a/1", "ab"} {
		tokens[name] = mustAcquire(t, s, fmt.Sprintf(`{"name":%q,"owner":"o-%s","ttl_ms":1000,"lease_id":"%s-%s"}`,
			name, name, leaseA, strings.ReplaceAll(name, "/", "_"))).FencingToken
	}
	// A released lock and one in its lock-delay are not held: not listed.
	mustAcquire(t, s, `{"name":"a/3","ttl_ms":1000,"lease_id":"`+leaseB+`"}`)
	wantJSON(t, do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"a/3","lease_id":"`+leaseB+`"}`), http.StatusOK, `{"released":true}`)

	item := func(name string) string {
		return fmt.Sprintf(`{"name":%q,"held":true,"owner":"o-%s","fencing_token":%d,"ttl_ms":1000,"index":%[3]d}`, name, name, tokens[name])
	}
	// The index is the highest under the prefix, held or not: a/3's
	// release (entry 7) counts under "" and "a".
	list := func(truncated bool, names ...string) string {
		items := make([]string, len(names))
		var idx uint64
		for i, n := range names {
			items[i] = item(n)
			idx = max(idx, tokens[n])
		}
		if len(names) > 0 && strings.HasPrefix(names[0], "a") {
			idx = 7
		}
		return fmt.Sprintf(`{"locks":[%s],"truncated":%v,"index":%d}`, strings.Join(items, ","), truncated, idx)
	}
	cases := []struct {
		query string
		want  string
	}{
		{"", list(false, "a/1", "a/2", "ab", "b", "c")},
		{"?prefix=a", list(false, "a/1", "a/2", "ab")},
		{"?prefix=a/", list(false, "a/1", "a/2")},
		{"?prefix=a%2F", list(false, "a/1", "a/2")},
		{"?prefix=zzz", list(false)},
		{"?limit=2", list(true, "a/1", "a/2")},
		{"?limit=5", list(false, "a/1", "a/2", "ab", "b", "c")},
		{"?limit=4", list(true, "a/1", "a/2", "ab", "b")},
		{"?prefix=a&limit=1", list(true, "a/1")},
		{"?prefix=a&limit=3", list(false, "a/1", "a/2", "ab")},
		{"?stale=true&prefix=b", list(false, "b")},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			rec := do(t, s, http.MethodGet, "/v1/locks"+tc.query, "")
			wantJSON(t, rec, http.StatusOK, tc.want)
			if strings.Contains(rec.Body.String(), leaseA) || strings.Contains(rec.Body.String(), "lease_id") {
				t.Errorf("list shows a lease id: %s", rec.Body)
			}
		})
	}
}

// A lock's path is its name, literally: p//q is not p/q (a router that
// cleans paths would redirect it there, to another lock).
func TestGetPathIsLiteral(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	mustAcquire(t, s, `{"name":"p/q","owner":"w","ttl_ms":1000}`)
	for _, name := range []string{"p//q", "p/./q", "p/../q", "/p/q", "p/q/"} {
		rec := do(t, s, http.MethodGet, "/v1/locks/"+name, "")
		wantJSON(t, rec, http.StatusOK, `{"name":"`+name+`","held":false,"index":0}`)
	}
	rec := do(t, s, http.MethodGet, "/v1/locks/p/q", "")
	wantJSON(t, rec, http.StatusOK, `{"name":"p/q","held":true,"owner":"w","fencing_token":1,"ttl_ms":1000,"index":1}`)
}

// A query parameter that cannot be unescaped is refused, never dropped
// (a dropped prefix lists every lock).
func TestBadQueryEscapes(t *testing.T) {
	cases := []struct{ target, msg string }{
		{"/v1/locks?prefix=%zz", "prefix:"},
		{"/v1/locks?prefix=a%", "prefix:"},
		{"/v1/locks?limit=%zz", "limit:"},
		{"/v1/locks?prefix=a&%zz=1", "query:"},
		{"/v1/locks/a?stale=%zz", "stale:"},
	}
	for _, tc := range cases {
		t.Run(tc.target, func(t *testing.T) {
			f := newLeader("n1")
			rec := do(t, newServer(f), http.MethodGet, tc.target, "")
			wantError(t, rec, http.StatusBadRequest, api.CodeBadRequest, tc.msg)
			if len(f.stales) != 0 {
				t.Error("a bad query reached the store")
			}
		})
	}
	rec := do(t, newServer(newLeader("n1")), http.MethodGet, "/v1/locks?prefix=a%2Fb&limit=2&stale=false", "")
	wantJSON(t, rec, http.StatusOK, `{"locks":[],"truncated":false,"index":0}`)
}
