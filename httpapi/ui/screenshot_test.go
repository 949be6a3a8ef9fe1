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
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/clustertest"
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
// script has polled, names the leader and shows the lock with its holder and
// token. The screenshot stays as an artifact; its path is logged.
func TestStatusPageInBrowser(t *testing.T) {
	bin := chromium(t)
	if testing.Short() {
		t.Skip("starts a browser")
	}
	cl := clustertest.Start(t, 3)
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
	run("--screenshot="+shot, page)
	if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	t.Logf("screenshot of %s (leader %s, lock orders/89041 held): %s", page, leader.ID, shot)
	fmt.Fprintf(os.Stderr, "status page screenshot: %s\n", shot)
}
