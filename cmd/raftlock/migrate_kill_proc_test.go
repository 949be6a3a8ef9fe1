package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SIGKILL of `raftlock serve` at many points of its start while it moves
// the log between stores (boltdb -> wal and back, alternating, so a start of
// either kind finds what a killed move of the other left), then a clean
// start of each kind: every lock and token written before must be there.
// No snapshot exists, so only the moved log can carry them.
func TestServeKilledDuringLogStoreMigrationKeepsLog(t *testing.T) {
	s := newSingleNode(t)
	noSnap := []string{"--snapshot-threshold", "1000000", "--snapshot-interval", "1h"}
	client := &http.Client{Timeout: 5 * time.Second}
	post := func(path string, body any) (int, map[string]any, error) { return s.post(client, path, body) }
	ready := func() { s.waitWritable(t, client) }
	tokens := map[string]uint64{}
	var mu sync.Mutex

	p := s.start(t, append(noSnap, "--log-store", "boltdb")...)
	ready()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				name := fmt.Sprintf("m/%d/%d", w, i)
				code, body, err := post("/v1/locks/acquire", map[string]any{"name": name, "owner": "w", "ttl_ms": 3_600_000})
				if err != nil || code != 200 {
					t.Errorf("acquire %s: %d %v %v", name, code, body, err)
					return
				}
				mu.Lock()
				tokens[name] = uint64(body["fencing_token"].(float64))
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	s.stop(t, p)

	verify := func(what string) {
		t.Helper()
		for name, tok := range tokens {
			resp, err := client.Get(s.endpoint + "/v1/locks/" + url.PathEscape(name))
			if err != nil {
				t.Fatalf("%s: get %s: %v", what, name, err)
			}
			var l struct {
				Held         bool   `json:"held"`
				FencingToken uint64 `json:"fencing_token"`
			}
			json.NewDecoder(resp.Body).Decode(&l)
			resp.Body.Close()
			if !l.Held || l.FencingToken != tok {
				t.Fatalf("%s: %s reads back held=%v token %d, want token %d", what, name, l.Held, l.FencingToken, tok)
			}
		}
	}

	kinds := []string{"wal", "boltdb"}
	moved := 0
	leftovers := map[string]int{} // kills that landed mid-move
	for i, d := range []int{0, 2, 4, 6, 8, 10, 13, 16, 20, 25, 30, 40, 50, 65, 80, 100, 130, 170, 220, 300} {
		kind := kinds[i%2]
		p := s.start(t, append(noSnap, "--log-store", kind)...)
		time.Sleep(time.Duration(d) * time.Millisecond) // where in the start the kill lands
		p.Kill()
		<-p.Done()
		if b, _ := os.ReadFile(p.LogPath); strings.Contains(string(b), "moved raft log") {
			moved++
		}
		for _, left := range []string{"wal.migrating", "wal.dropped"} {
			if _, err := os.Stat(filepath.Join(s.data, left)); err == nil {
				leftovers[left]++
			}
		}
	}
	t.Logf("%d of 20 killed starts had finished a move; kills that left a move half done: %v", moved, leftovers)
	for _, kind := range kinds {
		p := s.start(t, append(noSnap, "--log-store", kind)...)
		ready()
		verify("after the kills, on " + kind)
		p.Signal(syscall.SIGTERM)
		<-p.Done()
	}
}
