package raftnode_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// BenchmarkAcquireRelease measures acquire+release cycles against the leader
// of a three-node loopback cluster, each worker on its own lock, and reports
// latency percentiles of each call.
//
//	go test -run=NONE -bench=AcquireRelease -benchtime=5s ./raftnode/
func BenchmarkAcquireRelease(b *testing.B) {
	for _, workers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			c := testenv.Start(b, 3)
			url := c.Leader().URL()
			client := &http.Client{Transport: &http.Transport{MaxIdleConns: workers, MaxIdleConnsPerHost: workers}}
			var acq, rel latencies
			var next atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					name := fmt.Sprintf("bench/%d", w)
					lease := fmt.Sprintf("bench-lease-%08d", w)
					for next.Add(1) <= int64(b.N) {
						acq.add(b, post(b, client, url+"/v1/locks/acquire", fmt.Sprintf(`{"name":%q,"lease_id":%q,"ttl_ms":10000}`, name, lease)))
						rel.add(b, post(b, client, url+"/v1/locks/release", fmt.Sprintf(`{"name":%q,"lease_id":%q}`, name, lease)))
					}
				}(w)
			}
			wg.Wait()
			b.StopTimer()
			acq.report(b, "acquire")
			rel.report(b, "release")
		})
	}
}

func post(b *testing.B, c *http.Client, url, body string) time.Duration {
	start := time.Now()
	resp, err := c.Post(url, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		b.Error(err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Errorf("%s: status %d", url, resp.StatusCode)
	}
	return time.Since(start)
}

type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(b *testing.B, d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B, what string) {
	if len(l.d) == 0 {
		return
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	pct := func(p float64) float64 {
		return float64(l.d[int(p*float64(len(l.d)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), what+"-p50-ms")
	b.ReportMetric(pct(0.99), what+"-p99-ms")
}
