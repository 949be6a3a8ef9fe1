package raftnode_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

// BenchmarkOverload offers 20 times the sustainable load (320 concurrent
// clients against a cluster whose acquire p99 stays near 10 ms up to 16) with
// the apply queue bounded at 32, and reports the latency of accepted writes
// and of shed ones.
// Shed clients back off 50 ms before trying again.
//
//	go test -run=NONE -bench=Overload -benchtime=20000x ./raftnode/
func BenchmarkOverload(b *testing.B) {
	for _, bound := range []int{32, 1 << 20} {
		b.Run(fmt.Sprintf("bound=%d", bound), func(b *testing.B) { benchOverload(b, bound) })
	}
}

func benchOverload(b *testing.B, bound int) {
	const clients, backoff = 320, 50 * time.Millisecond
	c := testenv.Start(b, 3, testenv.Options{Configure: func(cfg *raftnode.Config) { cfg.MaxPendingApplies = bound }})
	url := c.Leader().URL()
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients}, Timeout: 30 * time.Second}
	var accepted, shed latencies
	var other atomic.Int64
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			body := fmt.Sprintf(`{"name":"overload/%d","lease_id":"overload-lease-%06d","ttl_ms":10000}`, w, w)
			for next.Add(1) <= int64(b.N) {
				start := time.Now()
				resp, err := client.Post(url+"/v1/locks/acquire", "application/json", bytes.NewReader([]byte(body)))
				if err != nil {
					if other.Add(1) == 1 {
						b.Log(err)
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					accepted.add(b, time.Since(start))
				case 429:
					shed.add(b, time.Since(start))
					// Back off as the client library does; a client that
					// re-sends at once only measures the HTTP stack's CPU.
					time.Sleep(backoff)
				default:
					other.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	b.StopTimer()
	accepted.report(b, "accepted")
	shed.report(b, "shed")
	if len(shed.d) > 0 {
		b.ReportMetric(float64(len(shed.d))/float64(b.N), "shed-fraction")
	}
	b.ReportMetric(float64(other.Load()), "errors")
}
