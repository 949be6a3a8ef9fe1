package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testenv"
)

// watchFake serves lock reads with indexes and blocking reads
// (?index=N&wait_ms=M), as the server does, for watch and leader
// until the cluster serves them.
type watchFake struct {
	mu      sync.Mutex
	index   uint64
	locks   map[string]api.Lock // a free lock: Held false, its freeing index
	changed chan struct{}
	srv     *httptest.Server
}

func startWatchFake(t *testing.T) *watchFake {
	f := &watchFake{index: 100, locks: map[string]api.Lock{}, changed: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// set changes lock name (value "" and held false: freed) at a new index.
func (f *watchFake) set(name string, held bool, owner, value string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	l := api.Lock{Name: name, Held: held, Index: f.index}
	if held {
		l.Owner, l.Value, l.FencingToken, l.TTLMs = owner, value, f.index, 10000
	}
	f.locks[name] = l
	close(f.changed)
	f.changed = make(chan struct{})
	return f.index
}

func (f *watchFake) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(api.HeaderNode, "n1")
	w.Header().Set(api.HeaderLeader, "n1")
	name := strings.TrimPrefix(r.URL.Path, "/v1/locks/")
	q := r.URL.Query()
	after, _ := strconv.ParseUint(q.Get("index"), 10, 64)
	wms, _ := strconv.ParseInt(q.Get("wait_ms"), 10, 64)
	until := time.Now().Add(time.Duration(wms) * time.Millisecond)
	for {
		f.mu.Lock()
		l, ok := f.locks[name]
		if !ok {
			l = api.Lock{Name: name}
		}
		changed := f.changed
		f.mu.Unlock()
		if l.Index > after || q.Get("index") == "" || !time.Now().Before(until) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set(api.HeaderIndex, strconv.FormatUint(l.Index, 10))
			var body any = l
			if !l.Held {
				body = api.FreeLock{Name: name, Index: l.Index}
			}
			_ = json.NewEncoder(w).Encode(body)
			return
		}
		select {
		case <-changed:
		case <-time.After(time.Until(until)):
		case <-r.Context().Done():
			return
		}
	}
}

func TestCLILeader(t *testing.T) {
	f := startWatchFake(t)
	base := env{"RAFTLOCK_ENDPOINTS=" + f.srv.URL}
	step{name: "nobody leads", args: args("leader", "svc"), code: exitHeld, stderr: "^raftlock leader: nobody leads svc\n$"}.run(t, base)
	f.set("svc", true, "host-a", "10.0.0.1:8080")
	step{name: "value", args: args("leader", "svc"), stdout: "^10.0.0.1:8080\n$"}.run(t, base)
	step{name: "json", args: args("leader", "--json", "svc"), check: func(t *testing.T, r result) {
		var l api.Lock
		decode(t, r.stdout, &l)
		if !l.Held || l.Owner != "host-a" || l.Value != "10.0.0.1:8080" || l.Index != 101 {
			t.Errorf("leader --json: %+v", l)
		}
	}}.run(t, base)
	f.set("svc", false, "", "")
	step{name: "freed", args: args("leader", "--json", "svc"), code: exitHeld, stdout: `"held":false`, stderr: "nobody leads"}.run(t, base)
}

func TestCLIWatch(t *testing.T) {
	f := startWatchFake(t)
	var stdout, stderr syncBuffer
	sigs := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() {
		done <- runWatch([]string{"--json", "svc"}, &stdout, &stderr, env{"RAFTLOCK_ENDPOINTS=" + f.srv.URL}, sigs)
	}()
	lines := func(n int) []string {
		t.Helper()
		var ls []string
		waitUntil(t, func() bool {
			ls = strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
			return len(ls) >= n && ls[0] != ""
		})
		return ls
	}
	lines(1) // the first state is printed before any change
	i1 := f.set("svc", true, "host-a", "a")
	lines(2)
	i2 := f.set("svc", true, "host-a", "a2")
	lines(3)
	i3 := f.set("svc", false, "", "")
	ls := lines(4)
	sigs <- syscall.SIGINT
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("watch exited %d after SIGINT, want 0; stderr %q", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch still running 10s after SIGINT")
	}
	want := []api.Lock{
		{Name: "svc"},
		{Name: "svc", Held: true, Owner: "host-a", Value: "a", FencingToken: i1, TTLMs: 10000, Index: i1},
		{Name: "svc", Held: true, Owner: "host-a", Value: "a2", FencingToken: i2, TTLMs: 10000, Index: i2},
		{Name: "svc", Index: i3},
	}
	if len(ls) != len(want) {
		t.Fatalf("watch printed %q, want %d lines", ls, len(want))
	}
	for i, line := range ls {
		var got api.Lock
		decode(t, line, &got)
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("line %d: %+v, want %+v", i, got, want[i])
		}
	}
	if stderr.String() != "" {
		t.Errorf("stderr %q", stderr.String())
	}
}

func TestCLIWatchUsage(t *testing.T) {
	none := env{"RAFTLOCK_ENDPOINTS=http://127.0.0.1:1"}
	step{name: "neither", args: args("watch"), code: exitUsage, stderr: "missing NAME"}.run(t, none)
	step{name: "both", args: args("watch", "--prefix", "p", "x"), code: exitUsage, stderr: "not both"}.run(t, none)
	step{name: "leader", args: args("leader"), code: exitUsage, stderr: "missing arguments"}.run(t, none)
	step{name: "elect without command", args: args("elect", "--value", "v", "x"), code: exitUsage, stderr: "missing the command"}.run(t, none)
	step{name: "elect lease id", args: args("elect", "--lease-id", "0123456789abcdefgh", "x", "--", "true"), code: exitUsage, stderr: "--lease-id"}.run(t, none)
	for _, cmd := range []string{"watch", "leader", "elect"} {
		r := runCLI(t, nil, cmd, "--help")
		if r.code != exitOK || !strings.Contains(r.stdout, "Usage: raftlock "+cmd) || !strings.Contains(r.stdout, "Example") {
			t.Errorf("%s --help: exit %d, %q", cmd, r.code, r.stdout)
		}
	}
}

// waitUntil polls cond for up to 10s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCLIWatchCluster: watch on a real cluster prints the free lock, its
// holder and its release, then exits 0 on SIGINT.
func TestCLIWatchCluster(t *testing.T) {
	cl := testenv.Start(t, 3)
	c, err := client.New(cl.Endpoints(), client.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testenv.Context(t, time.Minute)
	var stdout, stderr syncBuffer
	sigs := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() {
		done <- runWatch([]string{"svc/watched"}, &stdout, &stderr, endpointsEnv(cl.Endpoints()), sigs)
	}()
	waitUntil(t, func() bool { return strings.Contains(stdout.String(), "svc/watched: free") })
	lease, err := c.TryAcquire(ctx, "svc/watched", client.AcquireOptions{TTL: 30 * time.Second, Owner: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	held := `svc/watched: held by "w1", token ` + strconv.FormatUint(lease.Token(), 10)
	waitUntil(t, func() bool { return strings.Contains(stdout.String(), held) })
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return strings.Count(stdout.String(), "svc/watched: free") == 2 })
	sigs <- syscall.SIGINT
	if code := <-done; code != exitOK {
		t.Errorf("exit %d after SIGINT; stderr %q", code, stderr.String())
	}
	t.Logf("watch printed:\n%s", stdout.String())
}
