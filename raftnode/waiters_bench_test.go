package raftnode_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// BenchmarkDrainQueue compares 1,000 clients taking one lock in turn by
// parking on the leader (wait_ms) against the same clients polling every
// 50 ms. It reports the time from the first release until the last client
// has held and released the lock, the CPU the process (three nodes and the
// clients) spent meanwhile, and the requests sent.
//
//	go test -run=NONE -bench=DrainQueue -benchtime=1x ./raftnode/
func BenchmarkDrainQueue(b *testing.B) {
	for _, mode := range []string{"wait", "poll-50ms"} {
		b.Run(mode, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				drainQueue(b, mode == "wait")
			}
		})
	}
}

func drainQueue(b *testing.B, wait bool) {
	const clients = 1000
	c := testenv.Start(b, 3)
	leader := c.Leader()
	url := leader.URL()
	httpc := &http.Client{Transport: &http.Transport{MaxIdleConns: clients + 1, MaxIdleConnsPerHost: clients + 1}}
	post := func(path, body string) int {
		resp, err := httpc.Post(url+path, "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			b.Error(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if post("/v1/locks/acquire", `{"name":"q","lease_id":"holder-0123456789abcdef","ttl_ms":60000}`) != 200 {
		b.Fatal("holder could not acquire")
	}
	var requests atomic.Int64
	var started, done sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < clients; i++ {
		started.Add(1)
		done.Add(1)
		go func(i int) {
			defer done.Done()
			lease := fmt.Sprintf("client-%06d-abcdefghij", i)
			waitMs := 0
			if wait {
				waitMs = 120000
			}
			acq := fmt.Sprintf(`{"name":"q","lease_id":%q,"ttl_ms":60000,"wait_ms":%d}`, lease, waitMs)
			started.Done()
			if !wait {
				<-start
			}
			for {
				requests.Add(1)
				if post("/v1/locks/acquire", acq) == 200 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			requests.Add(1)
			post("/v1/locks/release", fmt.Sprintf(`{"name":"q","lease_id":%q}`, lease))
		}(i)
	}
	started.Wait()
	if wait {
		testenv.WaitFor(b, 60*time.Second, "all waiters parked", func() bool { return leader.Waiters() == clients })
	}
	cpu0 := cpuTime()
	t0 := time.Now()
	b.ResetTimer()
	close(start)
	post("/v1/locks/release", `{"name":"q","lease_id":"holder-0123456789abcdef"}`)
	done.Wait()
	b.StopTimer()
	b.ReportMetric(time.Since(t0).Seconds(), "drain-s")
	b.ReportMetric((cpuTime() - cpu0).Seconds(), "cpu-s")
	b.ReportMetric(float64(requests.Load()), "requests")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
