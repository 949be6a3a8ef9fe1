package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// A single `raftlock serve` on the WAL (the default) with snapshots and
// log compaction every few entries, killed with SIGKILL while four workers
// acquire, and restarted, several times. Every acquire answered 200 must
// be there after each restart with its token, and tokens must go on rising.
func TestServeKill9OnWALKeepsAcknowledgedWrites(t *testing.T) {
	s := newSingleNode(t) // --snapshot-threshold 2 --snapshot-interval 50ms --trailing-logs 1
	client := &http.Client{Timeout: 5 * time.Second}
	type ack struct {
		token uint64
		lease string
	}
	var mu sync.Mutex
	acked := map[string]ack{}
	var maxTok uint64
	post := func(path string, body any) (int, map[string]any, error) { return s.post(client, path, body) }
	ready := func() { s.waitWritable(t, client) }
	check := func(round int) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for name, a := range acked {
			resp, err := client.Get(s.endpoint + "/v1/locks/" + url.PathEscape(name))
			if err != nil {
				t.Fatalf("round %d: get %s: %v", round, name, err)
			}
			var l struct {
				Held         bool   `json:"held"`
				FencingToken uint64 `json:"fencing_token"`
			}
			json.NewDecoder(resp.Body).Decode(&l)
			resp.Body.Close()
			if !l.Held || l.FencingToken != a.token {
				t.Fatalf("round %d: acknowledged %s (token %d) reads back as held=%v token %d after kill -9", round, name, a.token, l.Held, l.FencingToken)
			}
		}
	}

	p := s.start(t)
	for round := 1; round <= 6; round++ {
		ready()
		check(round)
		var n atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					name := fmt.Sprintf("r%d/w%d/%d", round, w, i)
					lease := fmt.Sprintf("lease-%d-%d-%d-0123456789", round, w, i)
					code, body, err := post("/v1/locks/acquire", map[string]any{"name": name, "owner": "w", "ttl_ms": 3_600_000, "lease_id": lease})
					if err != nil {
						return // the node is gone
					}
					if code == 200 {
						tok := uint64(body["fencing_token"].(float64))
						mu.Lock()
						acked[name] = ack{tok, lease}
						maxTok = max(maxTok, tok)
						mu.Unlock()
						n.Add(1)
					}
				}
			}(w)
		}
		// Kill after a varying number of acknowledged writes, mid-stream.
		target := int64(40 + 37*round)
		testenv.WaitFor(t, 30*time.Second, "acknowledged writes", func() bool { return n.Load() >= target })
		p.Kill()
		close(stop)
		wg.Wait()
		p = s.start(t)
	}
	ready()
	check(5)
	mu.Lock()
	before := maxTok
	mu.Unlock()
	code, body, err := post("/v1/locks/acquire", map[string]any{"name": "final", "owner": "w", "ttl_ms": 60_000})
	if err != nil || code != 200 {
		t.Fatalf("final acquire: %d %v %v", code, body, err)
	}
	if tok := uint64(body["fencing_token"].(float64)); tok <= before {
		t.Fatalf("token %d after restarts, not above %d granted before", tok, before)
	}
	s.stop(t, p)
}
