// Command ramp is the client side of scripts/bench-ramp.sh: one tenant ramps
// parked acquires (wait_ms) or blocking reads on the leader while probes and
// another tenant measure what they see.
//
//	go run ./scripts/ramp --url https://127.0.0.1:17501 --ca ca.pem \
//	    --ramp-token T1 --calm-token T2 --mode waits --n 60000
//
// The ramping tenant starts --n goroutines over --ramp-time, each looping
// until --duration ends: an acquire of RAMP_PREFIX+"hot" (held by the ramp
// itself) with wait_ms, or a blocking read of it at its current index. A
// 429 is retried after its retry_after_ms with jitter (a well-behaved
// client), a refused or reset connection after 100ms. Requests share at
// most --conns connections (a client's pool; the node's own cap is 4096).
// Meanwhile /healthz and /readyz are probed every --probe-every on fresh
// connections at --probe-url (as an orchestrator does), and the calm tenant
// runs acquire/release cycles on keep-alive connections; an acquire's
// latency counts from its first try to its 200, retries after 429
// included. --role ramp or probe runs one side only: bench-ramp.sh runs
// them as two processes, since probes in the ramp's process would wait
// behind its goroutines and measure the client. Prints one JSON object:
// latencies (ms) by kind, overall and "steady" (from 2s after the ramp is
// started), counts by outcome, the process's CPU seconds.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type config struct {
	url, ca, probeURL      string
	rampToken, calmToken   string
	rampPrefix, calmPrefix string
	mode                   string
	n, conns               int
	rampTime, duration     time.Duration
	probeEvery             time.Duration
	waitMs                 int
	role                   string
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", "", "the leader's API URL")
	flag.StringVar(&c.probeURL, "probe-url", "", "where to probe /healthz and /readyz (default --url)")
	flag.StringVar(&c.ca, "ca", "", "CA PEM for https")
	flag.StringVar(&c.rampToken, "ramp-token", "", "bearer token of the ramping tenant")
	flag.StringVar(&c.calmToken, "calm-token", "", "bearer token of the calm tenant")
	flag.StringVar(&c.rampPrefix, "ramp-prefix", "tenantA/", "the ramping tenant's lock names")
	flag.StringVar(&c.calmPrefix, "calm-prefix", "tenantB/", "the calm tenant's lock names")
	flag.StringVar(&c.mode, "mode", "waits", "waits: acquires with wait_ms; reads: blocking reads")
	flag.IntVar(&c.n, "n", 60000, "ramping requests kept going at once")
	flag.IntVar(&c.conns, "conns", 4000, "connections the ramp may use")
	flag.DurationVar(&c.rampTime, "ramp-time", 5*time.Second, "time to start all --n")
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "how long to run")
	flag.DurationVar(&c.probeEvery, "probe-every", 20*time.Millisecond, "probe and calm-cycle interval")
	flag.IntVar(&c.waitMs, "wait-ms", 30000, "wait_ms of each ramping request")
	flag.StringVar(&c.role, "role", "both", "ramp: only the ramp; probe: only the probes and the calm tenant (run it as a process of its own beside a ramp, as an orchestrator's prober is: in the ramp's process it would wait behind the ramp's own goroutines); both")
	flag.Parse()
	if c.probeURL == "" {
		c.probeURL = c.url
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "ramp:", err)
		os.Exit(1)
	}
}

func tlsConfig(ca string) (*tls.Config, error) {
	if ca == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", ca)
	}
	return &tls.Config{RootCAs: pool}, nil
}

// series is a set of latencies, each with when it was taken.
type series struct {
	mu     sync.Mutex
	ms     []float64
	at     []time.Time
	failed int
}

func (s *series) fail() {
	s.mu.Lock()
	s.failed++
	s.mu.Unlock()
}

func (s *series) add(d time.Duration) {
	s.mu.Lock()
	s.ms = append(s.ms, float64(d.Microseconds())/1000)
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
}

// summary is over every sample, and as "steady" over those taken from
// steadyFrom on (the ramp fully started and its connections made).
func (s *series) summary(steadyFrom time.Time) map[string]any {
	out := s.quantiles(time.Time{})
	out["steady"] = s.quantiles(steadyFrom)
	if s.failed > 0 {
		out["failed"] = s.failed // counted above as 30s each
	}
	return out
}

func (s *series) quantiles(from time.Time) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v []float64
	for i, ms := range s.ms {
		if !s.at[i].Before(from) {
			v = append(v, ms)
		}
	}
	slices.Sort(v)
	q := func(p float64) float64 {
		if len(v) == 0 {
			return 0
		}
		return v[min(len(v)-1, int(p*float64(len(v))))]
	}
	return map[string]any{"n": len(v), "p50_ms": q(0.50), "p99_ms": q(0.99), "max_ms": q(1)}
}

type counts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counts) inc(k string) {
	c.mu.Lock()
	c.m[k]++
	c.mu.Unlock()
}

func run(c config) error {
	tc, err := tlsConfig(c.ca)
	if err != nil {
		return err
	}
	rampClient := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, MaxConnsPerHost: c.conns, MaxIdleConnsPerHost: c.conns}}
	calmClient := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, MaxIdleConnsPerHost: 4}, Timeout: 30 * time.Second}
	probeClient := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}, Timeout: 30 * time.Second}

	post := func(cl *http.Client, ctx context.Context, tok, path string, body any) (int, []byte, error) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, "POST", c.url+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := cl.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		return resp.StatusCode, out, err
	}
	hot := c.rampPrefix + "hot"
	ctx := context.Background()
	st, body, err := post(calmClient, ctx, c.rampToken, "/v1/locks/acquire", map[string]any{"name": hot, "owner": "ramp-holder", "ttl_ms": 3600000})
	if err != nil || (st != 200 && st != 409) {
		return fmt.Errorf("holding %s: %d %s %v", hot, st, body, err)
	}
	var idx struct {
		Index uint64 `json:"index"`
	}
	{
		req, _ := http.NewRequest("GET", c.url+"/v1/locks/"+hot, nil)
		req.Header.Set("Authorization", "Bearer "+c.rampToken)
		resp, err := calmClient.Do(req)
		if err != nil {
			return err
		}
		json.NewDecoder(resp.Body).Decode(&idx)
		resp.Body.Close()
	}

	runCtx, stop := context.WithTimeout(ctx, c.duration)
	defer stop()
	ramp := &counts{m: map[string]int{}}
	var inflight, peak atomic.Int64
	var wg sync.WaitGroup
	one := func() {
		var st int
		var body []byte
		var err error
		n := inflight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if c.mode == "reads" {
			req, _ := http.NewRequestWithContext(runCtx, "GET", c.url+"/v1/locks/"+hot+"?index="+strconv.FormatUint(idx.Index, 10)+"&wait_ms="+strconv.Itoa(c.waitMs), nil)
			req.Header.Set("Authorization", "Bearer "+c.rampToken)
			var resp *http.Response
			if resp, err = rampClient.Do(req); err == nil {
				st = resp.StatusCode
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
		} else {
			st, body, err = post(rampClient, runCtx, c.rampToken, "/v1/locks/acquire", map[string]any{"name": hot, "owner": "ramp", "ttl_ms": 10000, "wait_ms": c.waitMs})
		}
		inflight.Add(-1)
		pause := time.Duration(0)
		switch {
		case runCtx.Err() != nil:
			return
		case err != nil:
			ramp.inc("error")
			pause = 100 * time.Millisecond
		case st == 429:
			ramp.inc("429")
			var e struct {
				RetryAfterMs int `json:"retry_after_ms"`
			}
			json.Unmarshal(body, &e)
			pause = time.Duration(max(e.RetryAfterMs, 1000)) * time.Millisecond
			pause += rand.N(pause / 2)
		default:
			ramp.inc(strconv.Itoa(st))
		}
		select {
		case <-time.After(pause):
		case <-runCtx.Done():
		}
	}
	start := time.Now()
	n := c.n
	if c.role == "probe" {
		n = 0
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(int64(c.rampTime) * int64(i) / int64(c.n)))
			for runCtx.Err() == nil {
				one()
			}
		}()
	}

	var health, ready, calm, calmTry series
	calmCounts := &counts{m: map[string]int{}}
	probe := func(path string, s *series) {
		for t := time.NewTicker(c.probeEvery); runCtx.Err() == nil; <-t.C {
			t0 := time.Now()
			resp, err := probeClient.Get(c.probeURL + path)
			if err != nil {
				// A failed probe is a failed probe: it counts as the
				// orchestrator's timeout, and by itself.
				s.add(30 * time.Second)
				s.fail()
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s.add(time.Since(t0))
		}
	}
	var pw sync.WaitGroup
	if c.role == "ramp" {
		<-runCtx.Done()
	} else {
		pw.Add(3)
		go func() { defer pw.Done(); probe("/healthz", &health) }()
		go func() { defer pw.Done(); probe("/readyz", &ready) }()
		go func() {
			defer pw.Done()
			for i := 0; runCtx.Err() == nil; i++ {
				name := fmt.Sprintf("%scalm-%d", c.calmPrefix, i%8)
				t0 := time.Now()
				for runCtx.Err() == nil {
					t1 := time.Now()
					st, body, err := post(calmClient, ctx, c.calmToken, "/v1/locks/acquire", map[string]any{"name": name, "owner": "calm", "ttl_ms": 10000})
					calmTry.add(time.Since(t1))
					if err != nil {
						calmCounts.inc("error")
						time.Sleep(100 * time.Millisecond)
						continue
					}
					calmCounts.inc(strconv.Itoa(st))
					if st == 429 || st == 503 {
						time.Sleep(time.Second) // as Retry-After says
						continue
					}
					if st == 200 {
						calm.add(time.Since(t0))
						var l struct {
							LeaseID string `json:"lease_id"`
						}
						json.Unmarshal(body, &l)
						post(calmClient, ctx, c.calmToken, "/v1/locks/release", map[string]any{"name": name, "lease_id": l.LeaseID})
					}
					break
				}
				time.Sleep(c.probeEvery)
			}
		}()
	}
	pw.Wait()
	wg.Wait()
	steady := start.Add(c.rampTime + 2*time.Second)
	out := map[string]any{"mode": c.mode, "elapsed_s": time.Since(start).Seconds()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		out[c.role+"_client_cpu_s"] = cpu.Seconds()
	}
	if c.role != "probe" {
		out["n"], out["conns"], out["ramp_answers"], out["ramp_peak_in_flight"] = c.n, c.conns, ramp.m, peak.Load()
	}
	if c.role != "ramp" {
		out["healthz"], out["readyz"] = health.summary(steady), ready.summary(steady)
		out["calm_acquire"], out["calm_acquire_try"], out["calm_answers"] = calm.summary(steady), calmTry.summary(steady), calmCounts.m
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
