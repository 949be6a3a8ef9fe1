package raftnode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

const (
	forceAdminToken = "force-admin-token-0123456789"
	forceRWToken    = "force-rw-token-0123456789ab"
)

// callAs is call with a bearer token.
func callAs(t *testing.T, token, url string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// End to end over HTTP, through followers: a holder with a
// lock-delay, a read-write token refused (403), an admin's force release,
// the holder's renew then not_holder, held during the lock-delay, and
// another client granted after it with a larger token.
func TestForceReleaseEndToEnd(t *testing.T) {
	c := testenv.Start(t, 3, testenv.Options{Tokens: forceAdminToken + " admin ops\n" + forceRWToken + " read-write app\n"})
	testenv.WaitFor(t, 15*time.Second, "the leader to write command format 3", func() bool {
		return c.Leader().CommandVersion() >= 3
	})
	f := c.Followers()
	holder, other, admin := f[0].URL(), f[1].URL(), f[1].URL()

	st, body := callAs(t, forceRWToken, holder+"/v1/locks/acquire",
		map[string]any{"name": "force/a", "owner": "worker-a", "lease_id": leaseA, "ttl_ms": 60_000, "lock_delay_ms": 1000})
	if st != http.StatusOK {
		t.Fatalf("acquire: %d %v", st, body)
	}
	first := token(t, body)

	force := map[string]any{"name": "force/a", "force": true}
	if st, body := callAs(t, forceRWToken, admin+"/v1/locks/release", force); st != http.StatusForbidden || body["error"] != "forbidden" {
		t.Fatalf("force release with a read-write token: %d %v, want 403 forbidden", st, body)
	}
	if st, body := callAs(t, forceRWToken, holder+"/v1/locks/renew", map[string]any{"name": "force/a", "lease_id": leaseA}); st != http.StatusOK {
		t.Fatalf("the holder's renew after a refused force release: %d %v", st, body)
	}

	st, body = callAs(t, forceAdminToken, admin+"/v1/locks/release", force)
	h, _ := body["holder"].(map[string]any)
	if st != http.StatusOK || body["released"] != true || h["owner"] != "worker-a" || uint64(h["fencing_token"].(float64)) != first {
		t.Fatalf("force release: %d %v", st, body)
	}
	if st, body := callAs(t, forceRWToken, holder+"/v1/locks/renew", map[string]any{"name": "force/a", "lease_id": leaseA}); st != http.StatusConflict || body["error"] != "not_holder" {
		t.Fatalf("the holder's renew after the force release: %d %v, want 409 not_holder", st, body)
	}
	// The lock-delay: held with retry_after_ms, then granted.
	acq := map[string]any{"name": "force/a", "owner": "worker-b", "lease_id": leaseB, "ttl_ms": 60_000}
	st, body = callAs(t, forceRWToken, other+"/v1/locks/acquire", acq)
	if st == http.StatusConflict {
		if ms, _ := body["retry_after_ms"].(float64); body["error"] != "held" || ms <= 0 || ms > 1000 {
			t.Fatalf("acquire during the lock-delay: %d %v", st, body)
		}
		testenv.WaitFor(t, 15*time.Second, "the lock-delay to end", func() bool {
			st, body = callAs(t, forceRWToken, other+"/v1/locks/acquire", acq)
			return st != http.StatusConflict
		})
	} else {
		t.Logf("the first acquire came after the 1 s lock-delay (slow machine): %d", st)
	}
	if st != http.StatusOK || token(t, body) <= first {
		t.Fatalf("acquire after the lock-delay: %d %v (first token %d)", st, body, first)
	}
	// Nothing to end now that... a force release of a free lock is 200 released:false.
	if st, body := callAs(t, forceAdminToken, admin+"/v1/locks/release", map[string]any{"name": "force/free", "force": true}); st != http.StatusOK || body["released"] != false {
		t.Fatalf("force release of a free lock: %d %v", st, body)
	}
	c.EnsureSame(t)
}

// While one member reads only command format 2 (an older build), the
// leader writes format 2 and refuses a force release: 503
// not_supported_yet, and the lock stays held.
func TestForceReleaseRefusedBeforeEveryMemberReadsFormat3(t *testing.T) {
	c := testenv.Start(t, 3, testenv.Options{Configure: func(cfg *raftnode.Config) {
		inner := cfg.FetchProgress
		cfg.FetchProgress = func(ctx context.Context, id, addr string) (raftnode.Progress, error) {
			p, err := inner(ctx, id, addr)
			if id == "n3" {
				p.CommandVersion = 2
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
	testenv.WaitFor(t, 15*time.Second, "the leader to write format 2", func() bool {
		return leader.CommandVersion() == 2
	})
	if st, body := acquire(t, leader, "force/b", "o", leaseA, 60_000); st != http.StatusOK {
		t.Fatalf("acquire: %d %v", st, body)
	}
	st, body := call(t, "POST", c.Nodes[2].URL()+"/v1/locks/release", map[string]any{"name": "force/b", "force": true})
	msg, _ := body["message"].(string)
	if st != http.StatusServiceUnavailable || body["error"] != "not_supported_yet" || !strings.Contains(msg, "command version 3") {
		t.Fatalf("force release with n3 on format 2: %d %v, want 503 not_supported_yet", st, body)
	}
	if st, body := call(t, "GET", leader.URL()+"/v1/locks/force%2Fb", nil); st != http.StatusOK || body["held"] != true {
		t.Fatalf("the lock after a refused force release: %d %v", st, body)
	}
	c.EnsureSame(t)
}
