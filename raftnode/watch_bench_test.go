package raftnode_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

// BenchmarkWatchers1000 parks 1,000 blocking reads on one lock, spread over
// the three nodes of an in-process cluster, then changes the lock (a renew
// that changes its TTL) and measures, per watcher, the time from sending
// the change to the watcher's answer (so it includes the change's own
// commit: write_ms). Reported: p50/p99 over every watcher of every
// iteration, the leader's GET /v1/locks/{name} requests per change, and the
// process CPU per change (all three nodes and the 1,000 clients: the nodes
// share one process, so the leader's own share cannot be told apart).
//
//	go test -run '^$' -bench Watchers1000 -benchtime 10x ./raftnode/
func BenchmarkWatchers1000(b *testing.B) {
	for _, mode := range []struct{ name, query string }{{"linearizable", ""}, {"stale", "&stale=true"}} {
		b.Run(mode.name, func(b *testing.B) { benchWatchers(b, 1000, mode.query) })
	}
}

func benchWatchers(b *testing.B, watchers int, query string) {
	c := testenv.Start(b, 3)
	leader := c.Leader()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: watchers, MaxIdleConns: 2 * watchers}}
	post := func(path, body string) {
		resp, err := client.Post(leader.URL()+path, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatalf("POST %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("POST %s: %d", path, resp.StatusCode)
		}
	}
	post("/v1/locks/acquire", `{"name":"bench/w","owner":"o","lease_id":"`+leaseA+`","ttl_ms":600000}`)
	index := leader.Machine().Index("bench/w")
	c.WaitApplied(leader.Raft().AppliedIndex())

	var lat []time.Duration
	var writes time.Duration
	var cpu time.Duration
	var leaderGets float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		done := make([]time.Time, watchers)
		var wg sync.WaitGroup
		var failed sync.Once
		for w := 0; w < watchers; w++ {
			n := c.Nodes[w%len(c.Nodes)]
			url := fmt.Sprintf("%s/v1/locks/bench%%2Fw?index=%d&wait_ms=300000%s", n.URL(), index, query)
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Get(url)
				done[w] = time.Now()
				if err != nil {
					failed.Do(func() { b.Errorf("watcher: %v", err) })
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if got, _ := strconv.ParseUint(resp.Header.Get("X-Raftlock-Index"), 10, 64); resp.StatusCode != http.StatusOK || got <= index {
					failed.Do(func() { b.Errorf("watcher: %d, index %d (was %d)", resp.StatusCode, got, index) })
				}
			}()
		}
		testenv.WaitFor(b, time.Minute, "every watcher to park", func() bool {
			sum := 0
			for _, n := range c.Nodes {
				sum += raftnode.ParkedWatches(n.Node)
			}
			return sum == watchers
		})
		gets := leaderLockGets(b, leader)
		cpu0 := processCPU()
		t0 := time.Now()
		post("/v1/locks/renew", fmt.Sprintf(`{"name":"bench/w","lease_id":"%s","ttl_ms":%d}`, leaseA, 600000-1000*(i%2+1)))
		writes += time.Since(t0)
		wg.Wait()
		cpu += processCPU() - cpu0
		leaderGets += leaderLockGets(b, leader) - gets
		for _, d := range done {
			lat = append(lat, d.Sub(t0))
		}
		index = leader.Machine().Index("bench/w")
	}
	b.StopTimer()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50_ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99_ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max_ms")
	b.ReportMetric(ms(writes)/float64(b.N), "write_ms")
	b.ReportMetric(ms(cpu)/float64(b.N), "cpu_ms/change")
	b.ReportMetric(leaderGets/float64(b.N), "leader_gets/change")
}

// processCPU is the user+system CPU time of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// leaderLockGets is how many GET /v1/locks/{name} requests n has answered
// (its own and forwarded ones), from its /metrics.
func leaderLockGets(b *testing.B, n *testenv.Node) float64 {
	resp, err := http.Get(n.URL() + "/metrics")
	if err != nil {
		b.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "raftlock_http_requests_total{") && strings.Contains(l, `method="GET"`) && strings.Contains(l, `route="/v1/locks/{name`) {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += v
		}
	}
	return total
}
