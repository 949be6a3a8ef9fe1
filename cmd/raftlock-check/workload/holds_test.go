package workload

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// The session, semaphore and shared-lock cycles send what docs/API.md and
// the contract asks for: exactly one of ttl_ms and session_id, a limit
// with every permit, mode only as "shared", ids by the lease-id rule; and
// every call is journalled with its answer.
func TestHoldCyclesSendTheContract(t *testing.T) {
	validID := regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)
	var mu sync.Mutex
	seen := map[string]int{}
	var problems []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		seen[r.URL.Path]++
		bad := func(why string) { problems = append(problems, r.URL.Path+": "+why) }
		_, hasTTL := body["ttl_ms"]
		sid, hasSession := body["session_id"].(string)
		switch r.URL.Path {
		case "/v1/locks/acquire", "/v1/semaphores/acquire":
			if hasTTL == hasSession {
				bad("want exactly one of ttl_ms and session_id")
			}
			if m, ok := body["mode"]; ok && m != "shared" {
				bad("mode " + m.(string))
			}
			if !validID.MatchString(body["lease_id"].(string)) {
				bad("lease_id")
			}
			if r.URL.Path == "/v1/semaphores/acquire" {
				if l, ok := body["limit"].(float64); !ok || l < 1 {
					bad("no limit")
				}
				w.Write([]byte(`{"slot":1,"fencing_token":9,"limit":2}`))
				return
			}
		case "/v1/sessions":
			if !hasTTL || !validID.MatchString(sid) {
				bad("create wants ttl_ms and a valid session_id")
			}
		case "/v1/sessions/renew", "/v1/sessions/close":
			if !hasSession {
				bad("no session_id")
			}
		}
		w.Write([]byte(`{"fencing_token":9,"session_id":"` + sid + `"}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	j, err := history.Create(filepath.Join(dir, "c1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// Two names for the one server: retries go to "another node".
	other := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	c := New(Config{ID: 1, Nodes: []string{srv.URL, other}, Register: srv.URL, Journal: j, Seed: 7, Timeout: time.Second, Renew: true, Mix: 1,
		RWLocks: []string{"rw/0"}, Semaphores: map[string]int64{"sem/0": 2}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c.Run(ctx)
	j.Close()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("requests: %v", seen)
	for _, p := range problems {
		t.Error(p)
	}
	if seen["/v1/sessions"]+seen["/v1/locks/acquire"]+seen["/v1/semaphores/acquire"] == 0 {
		t.Fatalf("no acquire or session create sent: %v", seen)
	}
	f, _ := os.Open(filepath.Join(dir, "c1.jsonl"))
	defer f.Close()
	entries, _ := history.Parse(f)
	for _, o := range history.Pair(entries) {
		if o.Kind == history.Acquire && o.Session == "" && o.TTLMs == 0 {
			t.Errorf("%s: journalled with neither a session nor a TTL", o)
		}
	}
}
