package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/proccpu"
)

// A CPU-bound service serves cores ÷ (CPU per operation), so bench reports
// the servers' CPU per cycle next to cycles/s: it is the figure that does not
// move with how many cores the machine has or how many other programs share
// them. It is read from /proc/PID/stat of each server process (utime+stime)
// before and after the measured window; bench's own CPU is not in it.

// serverProc is one server process bench samples: its name (a raftlock node
// id, when it is a node, so that bench can tell the leader) and pid.
type serverProc struct {
	name string
	pid  int
}

// parseServerPids reads --server-pids: a comma-separated list of PID or
// NAME=PID. A bare PID is named after itself.
func parseServerPids(s string) ([]serverProc, error) {
	var out []serverProc
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		name, p, ok := strings.Cut(f, "=")
		if !ok {
			name, p = f, f
		}
		pid, err := strconv.Atoi(p)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("--server-pids: %q is not PID or NAME=PID", f)
		}
		if seen[name] {
			return nil, fmt.Errorf("--server-pids: %q given twice", name)
		}
		seen[name] = true
		out = append(out, serverProc{name: name, pid: pid})
	}
	return out, nil
}

// cpuSample is every server's CPU, the cluster's commit index and the
// leader's count of Raft rounds at one moment.
type cpuSample struct {
	cpu    []time.Duration
	commit uint64
	leader string
	// rounds is the leader's count of log writes (raft.leader.dispatchLog),
	// each one fdatasync on it and one AppendEntries to each follower;
	// roundsOK says it was read.
	rounds   uint64
	roundsOK bool
}

// cpuMeter samples the servers at the start and the end of bench's window.
type cpuMeter struct {
	procs     []serverProc
	endpoints []string
	hc        *http.Client
}

func (m *cpuMeter) sample(ctx context.Context) (cpuSample, error) {
	var s cpuSample
	// The commit index and the leader's rounds first, at both ends of the
	// window: the CPU reads that follow are microseconds, the HTTP round
	// trips are not.
	if ep, st, err := m.cluster(ctx, m.endpoints); err == nil {
		if leader, ok := leaderURL(ep, *st); ok {
			// The leader's commit index: a follower learns it with the
			// next AppendEntries, a batch or up to CommitTimeout later.
			if _, lst, err := m.cluster(ctx, []string{leader}); err == nil {
				st = lst
			}
			s.rounds, s.roundsOK = m.rounds(ctx, leader)
		}
		s.commit, s.leader = st.CommitIndex, st.Leader
	}
	for _, p := range m.procs {
		c, err := proccpu.Used(p.pid)
		if err != nil {
			return s, err
		}
		s.cpu = append(s.cpu, c)
	}
	return s, nil
}

// cluster asks endpoints in turn for GET /v1/cluster and returns the first
// answer and the endpoint that gave it.
func (m *cpuMeter) cluster(ctx context.Context, endpoints []string) (string, *client.ClusterStatus, error) {
	var last error
	for _, ep := range endpoints {
		b, err := m.get(ctx, ep+"/v1/cluster")
		if err != nil {
			last = err
			continue
		}
		var st client.ClusterStatus
		if err := json.Unmarshal(b, &st); err != nil {
			last = fmt.Errorf("GET %s/v1/cluster: %w", ep, err)
			continue
		}
		return ep, &st, nil
	}
	return "", nil, last
}

func (m *cpuMeter) get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := m.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, benchMaxMetrics))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d: %v", url, resp.StatusCode, err)
	}
	return b, nil
}

// benchMaxMetrics bounds what bench reads of a node's answer: /metrics
// is some tens of KiB.
const benchMaxMetrics = 4 << 20

// roundsMetric is the leader's count of log writes in GET /metrics.
const roundsMetric = "raftlock_raft_leader_dispatchLog_count"

// rounds reads the leader's count of Raft rounds from its /metrics.
func (m *cpuMeter) rounds(ctx context.Context, leader string) (uint64, bool) {
	b, err := m.get(ctx, leader+"/metrics")
	if err != nil {
		return 0, false
	}
	return metricValue(b, roundsMetric)
}

// metricValue finds an unlabelled metric's value in Prometheus text.
func metricValue(text []byte, name string) (uint64, bool) {
	for line := range strings.Lines(string(text)) {
		v, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f < 0 {
			return 0, false
		}
		return uint64(f), true
	}
	return 0, false
}

// cpuReport is the servers' CPU over bench's window.
type cpuReport struct {
	// TotalMs is every sampled server's CPU over the window, and
	// UsPerCycle that divided by the cycles completed.
	TotalMs    float64 `json:"total_ms"`
	UsPerCycle float64 `json:"us_per_cycle"`
	// Requests is every call bench sent (answered or not); Entries is how
	// far the cluster's commit index moved (0 when it could not be read).
	Requests int64  `json:"requests"`
	Entries  uint64 `json:"entries"`
	// Rounds is how many log writes the leader made (each one fdatasync on
	// it and one AppendEntries to each follower), and EntriesPerRound the
	// entries each carried on average: what most decides the CPU per cycle,
	// since a round costs far more than an entry. 0 when not read, or when
	// the leader changed.
	Rounds          uint64       `json:"rounds,omitempty"`
	EntriesPerRound float64      `json:"entries_per_round,omitempty"`
	Processes       []procReport `json:"processes"`
}

// procReport is one server process: the leader's CPU is divided by the
// requests (it answers every one), a follower's by the entries it stored.
type procReport struct {
	Name         string  `json:"name"`
	PID          int     `json:"pid"`
	Role         string  `json:"role,omitempty"` // leader or follower, when the names are node ids
	CPUMs        float64 `json:"cpu_ms"`
	UsPerCycle   float64 `json:"us_per_cycle"`
	UsPerRequest float64 `json:"us_per_request,omitempty"`
	UsPerEntry   float64 `json:"us_per_entry,omitempty"`
}

func (m *cpuMeter) report(before, after cpuSample, cycles, requests int64) *cpuReport {
	r := &cpuReport{Requests: requests}
	if after.commit > before.commit {
		r.Entries = after.commit - before.commit
	}
	leader := after.leader
	if leader != before.leader {
		leader = "" // it changed mid-run: no node served every request
	}
	if leader != "" && before.roundsOK && after.roundsOK && after.rounds > before.rounds {
		r.Rounds = after.rounds - before.rounds
		r.EntriesPerRound = float64(r.Entries) / float64(r.Rounds)
	}
	per := func(d time.Duration, n float64) float64 {
		if n <= 0 {
			return 0
		}
		return float64(d.Microseconds()) / n
	}
	var total time.Duration
	isNode := false
	for _, p := range m.procs {
		isNode = isNode || p.name == before.leader || p.name == after.leader
	}
	for i, p := range m.procs {
		d := after.cpu[i] - before.cpu[i]
		total += d
		pr := procReport{Name: p.name, PID: p.pid, CPUMs: msf(d), UsPerCycle: per(d, float64(cycles))}
		switch {
		case !isNode:
		case p.name == leader:
			pr.Role, pr.UsPerRequest = "leader", per(d, float64(requests))
		default:
			pr.Role, pr.UsPerEntry = "follower", per(d, float64(r.Entries))
		}
		r.Processes = append(r.Processes, pr)
	}
	r.TotalMs, r.UsPerCycle = msf(total), per(total, float64(cycles))
	return r
}

func (r *cpuReport) print(w io.Writer) {
	rounds := ""
	if r.Rounds > 0 {
		rounds = fmt.Sprintf(", %d Raft rounds of %.1f entries", r.Rounds, r.EntriesPerRound)
	}
	fmt.Fprintf(w, "server cpu: %.0f ms, %.0f µs per cycle (%d requests, %d entries%s)\n", r.TotalMs, r.UsPerCycle, r.Requests, r.Entries, rounds)
	for _, p := range r.Processes {
		line := fmt.Sprintf("  %-10s pid %-7d %8.0f ms %7.0f µs/cycle", p.Name, p.PID, p.CPUMs, p.UsPerCycle)
		switch {
		case p.Role == "leader":
			line += fmt.Sprintf("  leader, %.0f µs/request", p.UsPerRequest)
		case p.Role == "follower" && p.UsPerEntry > 0:
			line += fmt.Sprintf("  follower, %.0f µs/entry", p.UsPerEntry)
		case p.Role != "":
			line += "  " + p.Role
		}
		fmt.Fprintln(w, line)
	}
}
