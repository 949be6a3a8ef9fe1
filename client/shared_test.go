package client

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// sharedHook answers lock acquires as a cluster holding "a" shared by two
// readers would: a shared acquire is granted, an exclusive one is held.
func sharedHook(fc *fakeCluster) func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
	return func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path != "/v1/locks/acquire" {
			return false
		}
		if req.str("mode") == "shared" {
			writeJSON(w, 200, map[string]any{"name": req.str("name"), "owner": req.str("owner"), "lease_id": req.str("lease_id"),
				"fencing_token": 12, "ttl_ms": req.num("ttl_ms"), "mode": "shared"})
			return true
		}
		writeJSON(w, http.StatusConflict, map[string]any{"error": "held", "message": "held shared",
			"holder":  map[string]any{"owner": "r1", "fencing_token": 10},
			"holders": []map[string]any{{"owner": "r1", "fencing_token": 10}, {"owner": "r2", "fencing_token": 11}}})
		return true
	}
}

func TestSharedAcquire(t *testing.T) {
	fc := startFake(t, 1)
	c := realClient(t, fc.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fc.setHook(sharedHook(fc))
	l, err := c.TryAcquire(ctx, "a", AcquireOptions{TTL: time.Minute, Shared: true, Owner: "r3"})
	if err != nil {
		t.Fatal(err)
	}
	l.Detach()
	if !l.Shared() || l.Token() != 12 {
		t.Fatalf("shared %v token %d", l.Shared(), l.Token())
	}
	if err := l.SetValue(ctx, "v"); err == nil || len(fc.requests(path("/v1/locks/update"))) != 0 {
		t.Fatalf("SetValue on a shared hold: %v, %d updates sent; want an error and none", err, len(fc.requests(path("/v1/locks/update"))))
	}
	rs := fc.requests(path("/v1/locks/acquire"))
	if rs[0].str("mode") != "shared" {
		t.Fatalf("acquire body %+v", rs[0].Body)
	}
	_, err = c.TryAcquire(ctx, "a", AcquireOptions{TTL: time.Minute})
	var held *HeldError
	if !errors.As(err, &held) || held.Owner != "r1" || held.Token != 10 || len(held.Holders) != 2 || held.Holders[1] != (Holder{Owner: "r2", Token: 11, Remaining: -1}) {
		t.Fatalf("exclusive acquire = %v (%+v), want held listing both readers", err, held)
	}
	if rs := fc.requests(path("/v1/locks/acquire")); rs[1].Body["mode"] != nil {
		t.Fatalf("an exclusive acquire sent a mode: %+v", rs[1].Body)
	}
	if _, err := c.TryAcquire(ctx, "a", AcquireOptions{Shared: true, LockDelay: time.Second}); err == nil {
		t.Fatal("a shared acquire took a lock delay")
	}
	sent := len(fc.requests(path("/v1/locks/acquire")))
	if _, err := c.TryAcquire(ctx, "a", AcquireOptions{Shared: true, Value: "v"}); err == nil {
		t.Fatal("a shared acquire published a value")
	}
	if n := len(fc.requests(path("/v1/locks/acquire"))); n != sent {
		t.Fatalf("a shared acquire with a value was sent (%d acquires, want %d): the server answers it 400", n, sent)
	}
}

// A server that ignores the mode and grants exclusive is not trusted as a
// shared grant: the lease is given back.
func TestSharedAcquireGrantedExclusiveIsRefused(t *testing.T) {
	fc := startFake(t, 1)
	c := realClient(t, fc.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path == "/v1/locks/acquire" {
			delete(req.Body, "mode")
			writeJSON(w, 200, map[string]any{"name": "a", "owner": "", "lease_id": req.str("lease_id"), "fencing_token": 7, "ttl_ms": 60000})
			return true
		}
		return false
	})
	if _, err := c.TryAcquire(ctx, "a", AcquireOptions{TTL: time.Minute, Shared: true}); err == nil {
		t.Fatal("an exclusive grant passed for shared")
	}
	if n := len(fc.requests(path("/v1/locks/release"))); n != 1 {
		t.Fatalf("%d releases, want the grant given back", n)
	}
}
