//go:build raftlock_faults

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// These tests run real `raftlock serve` processes of a fault build
// (testenv.Binary with the raftlock_faults tag), move their clocks through
// POST /debug/clock, and judge the lease outcomes with the checker's own
// property (a): go test -tags raftlock_faults -run Clock ./cmd/raftlock

// clientDrift is the client library's allowance: a client trusts a lease
// until send + ttl × (1 − 0.01).
const clientDrift = 0.01

type faultCluster struct {
	t     *testing.T
	http  map[string]string // id -> base URL
	debug map[string]string // id -> debug base URL
	ops   []history.Op
	seq   int
}

func startFaultCluster(t *testing.T) *faultCluster {
	pc := testenv.StartProcs(t, procs.Options{Bin: testenv.Binary(t, "raftlock_faults"), Debug: true, Extra: []string{"--election-timeout", "500ms", "--heartbeat-timeout", "500ms"}})
	c := &faultCluster{t: t, http: map[string]string{}, debug: map[string]string{}}
	for _, n := range pc.Nodes {
		c.http[n.ID] = n.URL()
		c.debug[n.ID] = "http://" + n.DebugAddr
	}
	return c
}

// leader waits until every node names the same leader.
func (c *faultCluster) leader(not string) string {
	var l string
	testenv.WaitFor(c.t, 20*time.Second, "an agreed leader", func() bool {
		l = ""
		for _, u := range c.http {
			var info struct{ Leader string }
			if c.get(u+"/v1/cluster", &info) != nil || info.Leader == "" || (l != "" && info.Leader != l) {
				return false
			}
			l = info.Leader
		}
		return l != not
	})
	return l
}

func (c *faultCluster) get(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func (c *faultCluster) post(url string, body any) (int, []byte) {
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp.StatusCode, out.Bytes()
}

// clock moves node id's clock and checks the node took the fault.
func (c *faultCluster) clock(id, fault string) {
	var f map[string]any
	json.Unmarshal([]byte(fault), &f)
	if code, b := c.post(c.debug[id]+"/debug/clock", f); code != http.StatusOK {
		c.t.Fatalf("clock fault %s on %s: %d %s", fault, id, code, b)
	}
}

// acquire sends one journalled acquire to node id.
func (c *faultCluster) acquire(id string, client int, name, lease string, ttlMs int64) history.Op {
	c.seq++
	o := history.Op{ID: fmt.Sprint(c.seq), Client: client, Kind: history.Acquire, Name: name, Lease: lease, TTLMs: ttlMs, Node: id}
	o.Call = history.Now()
	code, b := c.post(c.http[id]+"/v1/locks/acquire", map[string]any{"name": name, "owner": fmt.Sprintf("c%d", client), "ttl_ms": ttlMs, "lease_id": lease})
	o.Return = history.Now()
	switch code {
	case http.StatusOK:
		var r struct {
			Token uint64 `json:"fencing_token"`
		}
		json.Unmarshal(b, &r)
		o.Outcome, o.Token = history.OK, r.Token
	case http.StatusConflict:
		o.Outcome = history.Held
	default:
		o.Outcome, o.Err = history.Unknown, fmt.Sprintf("%d %s", code, b)
	}
	c.ops = append(c.ops, o)
	return o
}

// contend polls acquires by another client until one is granted, and
// returns the grant.
func (c *faultCluster) contend(id string, client int, name string, ttlMs int64) history.Op {
	lease := fmt.Sprintf("contender-%d-%s", client, strings.ReplaceAll(name, "/", "_"))
	var got history.Op
	testenv.WaitFor(c.t, 30*time.Second, "the contender's grant of "+name, func() bool {
		got = c.acquire(id, client, name, lease, ttlMs)
		return got.Outcome == history.OK
	})
	return got
}

// A follower's monotonic clock an hour or two ahead, and wall clocks an
// hour off either way, change no lease outcome: not when the lease is
// granted by a leader with a wall jump, not when a follower with a jumped
// monotonic clock takes over while it is held, and not under a leader
// running 0.5 % fast (inside the 1 % bound). Every grant to a contender
// comes after the first holder's send + ttl × 0.99, which is what the
// checker's property (a) tests, and the locks do free.
func TestClockJumpsChangeNoLeaseOutcome(t *testing.T) {
	c := startFaultCluster(t)
	old := c.leader("")
	var fols []string
	for id := range c.http {
		if id != old {
			fols = append(fols, id)
		}
	}
	c.clock(fols[0], `{"jump_mono_ms":3600000,"jump_wall_ms":-3600000}`)
	c.clock(fols[1], `{"jump_mono_ms":7200000}`)
	c.clock(old, `{"jump_wall_ms":3600000}`)

	a := c.acquire(old, 1, "clock/a", "holder-aaaaaaaaaaaa", 3000)
	if a.Outcome != history.OK {
		t.Fatalf("acquire: %v %s", a, a.Err)
	}
	// Hand leadership to a follower whose monotonic clock is an hour ahead
	// while the lease is held: the new term's first stamp is only a base.
	if code, b := c.post(c.http[old]+"/v1/cluster/transfer-leadership", map[string]string{"id": fols[0]}); code != http.StatusOK {
		t.Fatalf("transfer to %s: %d %s", fols[0], code, b)
	}
	nl := c.leader(old)
	b := c.contend(nl, 2, "clock/a", 3000)

	// The new leader's wall clock jumps back, and it runs 0.5 % fast.
	c.clock(nl, `{"jump_wall_ms":-7200000,"rate":1.005}`)
	a2 := c.acquire(nl, 3, "clock/b", "holder-bbbbbbbbbbbb", 3000)
	if a2.Outcome != history.OK {
		t.Fatalf("acquire on the new leader: %v %s", a2, a2.Err)
	}
	b2 := c.contend(nl, 4, "clock/b", 3000)

	if vs := model.MutualExclusion(c.ops, clientDrift); len(vs) > 0 {
		t.Fatalf("property (a) violated: %v", vs)
	}
	t.Logf("clock/a: granted %v after the holder's send (trusted for %v); clock/b: %v",
		time.Duration(b.Return-a.Call), 2970*time.Millisecond, time.Duration(b2.Return-a2.Call))
}

// Beyond the bound the checker sees it: a leader running 20 % fast expires
// a 5 s lease after about 4.17 s, and a contender's grant lands while the
// holder still trusts its lease (until 4.95 s after its send).
func TestFastLeaderClockExpiresEarlyAndIsSeen(t *testing.T) {
	c := startFaultCluster(t)
	l := c.leader("")
	c.clock(l, `{"rate":1.2}`)
	a := c.acquire(l, 1, "clock/fast", "holder-fast-leader", 5000)
	if a.Outcome != history.OK {
		t.Fatalf("acquire: %v %s", a, a.Err)
	}
	b := c.contend(l, 2, "clock/fast", 5000)
	vs := model.MutualExclusion(c.ops, clientDrift)
	if len(vs) == 0 {
		t.Fatalf("no violation seen: the contender was granted %v after the holder's send", time.Duration(b.Return-a.Call))
	}
	t.Logf("seen: %v", vs[0])
}

// The dependency check of TestReleaseBuildHasNoClockFaults finds the fault
// clock in this build: it can fail.
func TestFaultBuildHasFaultClock(t *testing.T) {
	if !strings.Contains(goList(t), faultclockPkg) {
		t.Fatalf("a raftlock_faults build does not depend on %s", faultclockPkg)
	}
}
