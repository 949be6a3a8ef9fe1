package monitoring

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// repoRoot is the module root, found from this file.
func repoRoot(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..")
}

// metricRef matches the metric names a query uses: ours are all raftlock_*.
var metricRef = regexp.MustCompile(`\braftlock_[A-Za-z0-9_:]+`)

// dashboardExprs returns every query of the dashboard: panel targets (rows
// included) and templating queries.
func dashboardExprs(t *testing.T, data []byte) []string {
	t.Helper()
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
			Panels []json.RawMessage `json:"panels"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Panels) > 0 {
			t.Errorf("panel %q nests panels (a collapsed row): this test does not read them", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q has a target without expr", p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	return exprs
}

// startNode runs one real node, as an operator would (serve --dev: the same
// registry, raft's metrics included), and returns its URL.
func startNode(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ports := testenv.FreePorts(t, 2)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	n := testenv.StartServe(t, "n1", filepath.Join(dir, "n1.log"), []string{"--dev", "--data-dir", filepath.Join(dir, "data"),
		"--http-addr", httpAddr, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[1])})
	url := "http://" + httpAddr
	testenv.WaitFor(t, 30*time.Second, "node ready", func() bool {
		select {
		case <-n.Done():
			b, _ := os.ReadFile(n.LogPath)
			t.Fatalf("node exited:\n%s", b)
		default:
		}
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return url
}

// liveMetrics exercises the node (a grant, a held answer, reads) so labelled
// series exist, and returns the names of the series its /metrics serves.
func liveMetrics(t *testing.T, url string) map[string]bool {
	t.Helper()
	post := func(body string) {
		resp, err := http.Post(url+"/v1/locks/acquire", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	post(`{"name":"orders/1","owner":"a","ttl_ms":10000}`)
	post(`{"name":"orders/1","owner":"b","ttl_ms":10000}`) // 409 held
	for _, p := range []string{"/v1/locks/orders%2F1", "/v1/locks?prefix=orders%2F", "/v1/cluster"} {
		resp, err := http.Get(url + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		names[line[:strings.IndexAny(line, "{ ")]] = true
	}
	if !names["raftlock_is_leader"] {
		t.Fatalf("/metrics has no raftlock_is_leader; got:\n%s", body)
	}
	return names
}

// TestMonitoringUsesRealMetrics checks that every raftlock_* metric the
// dashboard and the alert rules query is served by a real node: a renamed
// metric would otherwise leave a silent panel and an alert that never fires.
func TestMonitoringUsesRealMetrics(t *testing.T) {
	dash, err := os.ReadFile(filepath.Join(repoRoot(t), "monitoring", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(filepath.Join(repoRoot(t), "monitoring", "prometheus-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	used := map[string][]string{} // metric -> where
	for _, e := range dashboardExprs(t, dash) {
		for _, m := range metricRef.FindAllString(e, -1) {
			used[m] = append(used[m], "grafana-dashboard.json")
		}
	}
	for _, line := range strings.Split(string(rules), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue // comments may name metrics loosely
		}
		for _, m := range metricRef.FindAllString(line, -1) {
			used[m] = append(used[m], "prometheus-rules.yml")
		}
	}
	if len(used) < 10 {
		t.Fatalf("only %d metrics found in the dashboard and rules: the parsing is broken", len(used))
	}
	live := liveMetrics(t, startNode(t))
	// Some series exist only in a cluster (forwarding by a follower): add a
	// real 3-node cluster's follower, exercised the same way.
	cl := testenv.Start(t, 3)
	for m := range liveMetrics(t, cl.Followers()[0].URL()) {
		live[m] = true
	}
	var missing []string
	for m, where := range used {
		if !live[m] {
			missing = append(missing, fmt.Sprintf("%s (in %s)", m, strings.Join(uniq(where), ", ")))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("no such metric on a real node's /metrics: %s", m)
	}
	if len(missing) == 0 {
		t.Logf("%d metrics used, all served", len(used))
	}
}

func uniq(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
