package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// chromium finds a headless-capable Chromium (Debian's package "chromium").
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("RAFTLOCK_REQUIRE_CHROMIUM") != "" {
		t.Fatal("no chromium on PATH and RAFTLOCK_REQUIRE_CHROMIUM is set (scripts/ci-deps.sh installs it)")
	}
	t.Skip("no chromium on PATH (Debian: apt-get install chromium)")
	return ""
}

// TestStatusPageInBrowser opens a follower's /ui/ in headless Chromium over
// a real 3-node cluster with a held lock, and checks that the page, once its
// script has polled, names the leader, shows the lock with its holder and
// token, and shows every member's applied index and readiness. The screenshot stays as an artifact; its path is logged.
func TestStatusPageInBrowser(t *testing.T) {
	bin := chromium(t)
	if testing.Short() {
		t.Skip("starts a browser")
	}
	cl := testenv.Start(t, 3)
	leader := cl.Leader()
	follower := cl.Followers()[0]
	resp, err := http.Post(follower.URL()+"/v1/locks/acquire", "application/json",
		strings.NewReader(`{"name":"orders/89041","owner":"worker-a","ttl_ms":600000}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("acquire: %d %s", resp.StatusCode, body)
	}
	var lease struct {
		FencingToken uint64 `json:"fencing_token"`
	}
	if err := json.Unmarshal(body, &lease); err != nil {
		t.Fatal(err)
	}
	// The page reads with stale=true: let every node apply the grant first.
	cl.WaitApplied(lease.FencingToken)

	// An artifact directory that outlives the test, unlike t.TempDir.
	dir, err := os.MkdirTemp("", "raftlock-ui-screenshot-")
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "status.png")
	page := follower.URL() + "/ui/?prefix=orders%2F"
	profile := t.TempDir()
	run := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		// The virtual time budget lets the page's fetches and first polls
		// finish before Chromium dumps or shoots: no sleeping here.
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--hide-scrollbars", "--no-first-run", "--user-data-dir=" + profile,
			"--window-size=1200,900", "--virtual-time-budget=5000"}
		cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}
	dom := string(run("--dump-dom", page))
	for _, want := range []string{
		fmt.Sprintf(`<dd id="leader" class="leader">%s</dd>`, leader.ID),
		`data-lock="orders/89041"`,
		"worker-a",
		`data-node="` + follower.ID + `"`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %s; DOM:\n%s", want, dom)
		}
	}
	// The lock's time left, read from the leader through the follower.
	if m := regexp.MustCompile(`data-col="left">([0-9.]+ (?:min|s|ms)) of 10\.0 min<`).FindStringSubmatch(dom); m == nil {
		t.Errorf("the lock row shows no time left; DOM:\n%s", dom)
	}
	// Every member's own applied index (at least the grant's, applied on
	// every node above) and readiness, though the page is on one follower.
	for _, n := range cl.Nodes {
		row := regexp.MustCompile(`<tr data-node="` + regexp.QuoteMeta(n.ID) + `">(.*?)</tr>`).FindStringSubmatch(dom)
		if row == nil {
			t.Errorf("no row for %s in the members table", n.ID)
			continue
		}
		applied := regexp.MustCompile(`data-col="applied">(\d+)<`).FindStringSubmatch(row[1])
		if applied == nil {
			t.Errorf("row of %s shows no applied index: %s", n.ID, row[1])
		} else if v, _ := strconv.ParseUint(applied[1], 10, 64); v < lease.FencingToken {
			t.Errorf("row of %s shows applied index %d, below the grant's %d", n.ID, v, lease.FencingToken)
		}
		if !regexp.MustCompile(`data-col="ready">yes<`).MatchString(row[1]) {
			t.Errorf("row of %s does not show ready yes: %s", n.ID, row[1])
		}
	}
	run("--screenshot="+shot, page)
	if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	t.Logf("screenshot of %s (leader %s, lock orders/89041 held): %s", page, leader.ID, shot)
	fmt.Fprintf(os.Stderr, "status page screenshot: %s\n", shot)
}
