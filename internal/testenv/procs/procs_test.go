package procs

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The checker binary runs clusters through this package: it must not pull
// in testing (and with it the test flags).
func TestNoTestingImport(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command("go", "list", "-f", `{{join .Deps " "}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		if d == "testing" {
			t.Fatal("procs imports testing")
		}
	}
}

func TestFreePortsDistinctAndBelowEphemeral(t *testing.T) {
	ports, err := FreePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < 20000 || p >= 32768 || seen[p] {
			t.Fatalf("port %d repeated or outside 20000-32767: %v", p, ports)
		}
		seen[p] = true
	}
}

// Done and ExitCode report a process that exits by itself; Terminate
// sends SIGKILL once StopTimeout passes on one that ignores SIGTERM.
func TestNodeExitAndStop(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh:", err)
	}
	dir := t.TempDir()
	n := &Node{ID: "x", Bin: "sh", Args: []string{"-c", "echo hello; exit 3"}, LogPath: dir + "/x.log"}
	if n.ExitCode() != -1 || n.Done() != nil {
		t.Fatalf("before Start: exit %d, done %v", n.ExitCode(), n.Done())
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	<-n.Done()
	if got := n.ExitCode(); got != 3 {
		t.Fatalf("exit code %d, want 3", got)
	}
	if err := n.Terminate(); err != nil || n.Running() {
		t.Fatalf("Terminate after exit: %v, running %v", err, n.Running())
	}

	n.Args = []string{"-c", "trap '' TERM; echo up; while :; do sleep 0.05; done"}
	n.StopTimeout = 200 * time.Millisecond
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	if n.Pid() == 0 {
		t.Fatal("no pid while running")
	}
	// SIGTERM must come after the trap is set, or sh dies of it at once.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(n.LogPath); strings.Contains(string(b), "up\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second run never said up")
		}
	}
	if err := n.Terminate(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Done():
	default:
		t.Fatal("Terminate returned before the process exited")
	}
	if n.Running() || n.Pid() != 0 || n.ExitCode() != -1 {
		t.Fatalf("after Terminate: running %v, pid %d, exit %d (want a SIGKILL's -1)", n.Running(), n.Pid(), n.ExitCode())
	}
	if b, _ := os.ReadFile(n.LogPath); !strings.Contains(string(b), "hello") {
		t.Fatalf("the log appended across restarts lost the first run's output:\n%s", b)
	}
}

// Binary builds once per tag set and process, and the default build is
// RAFTLOCK_BIN when that is set.
func TestBinaryOncePerTagSet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/raftlock")
	}
	t.Setenv(BinEnv, "")
	a, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(a)
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s is not an executable: %v", a, err)
	}
	b, err := Binary()
	if err != nil || b != a {
		t.Fatalf("second Binary() = %q, %v; want %q", b, err, a)
	}
	fi2, _ := os.Stat(b)
	if !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatal("the second call built again")
	}
	t.Setenv(BinEnv, "/opt/prebuilt/raftlock")
	if got, _ := Binary(); got != "/opt/prebuilt/raftlock" {
		t.Fatalf("with %s set, Binary() = %q", BinEnv, got)
	}
	if got, _ := Binary("raftlock_faults"); got == "/opt/prebuilt/raftlock" {
		t.Fatalf("%s stood in for a tagged build", BinEnv)
	}
}

// Post sends JSON, decodes a 200 answer, and turns any other status into
// an error that quotes the answer.
func TestPostDecodesOKAndQuotesRefusals(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Name string }
		if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&in) != nil {
			http.Error(w, "not json", http.StatusUnsupportedMediaType)
			return
		}
		if in.Name == "" {
			http.Error(w, `{"error":"bad_request"}`, http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `{"path":%q,"name":%q}`, r.URL.Path, in.Name)
	}))
	defer srv.Close()
	c := &Cluster{httpc: srv.Client()}
	n := &Node{ID: "n1", HTTPAddr: strings.TrimPrefix(srv.URL, "http://")}
	var out struct{ Path, Name string }
	if err := c.Post(context.Background(), n, "/v1/locks/acquire", map[string]string{"name": "a"}, &out); err != nil || out.Path != "/v1/locks/acquire" || out.Name != "a" {
		t.Fatalf("Post: %+v, %v", out, err)
	}
	if err := c.Post(context.Background(), n, "/v1/locks/acquire", map[string]string{}, nil); err == nil ||
		!strings.Contains(err.Error(), "status 400") || !strings.Contains(err.Error(), "bad_request") {
		t.Fatalf("Post of a refused body: %v, want the status and the answer", err)
	}
}
