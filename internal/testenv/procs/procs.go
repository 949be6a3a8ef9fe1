// Package procs runs real "raftlock serve" processes on loopback ports: one
// at a time (Node) or as a cluster (Start), and kills, pauses, resumes and
// restarts them; Binary builds the raftlock binary they run, once per
// process and build-tag set. The checker binary uses it, so it must not
// import testing; the tests' t-based layer over it is testenv (Binary,
// StartServe, StartProcs, FreePorts).
//
// Binary (or Build.Binary) is the one way a test gets a server binary.
// cmd/raftlock's tests once re-ran their own test binary as the server (a
// TestMain switch); that ran a server compiled together with the test
// files, worked in that package only, and gave a fault build of the server
// only by building the whole test binary with the tag. What it gave for
// free, the server code counting in `go test -cover`, a Build with
// CoverMode gives too (testenv.Binary asks for it under -cover). A real
// build costs a link per test process; the build cache keeps the compile.
package procs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Listen binds a free loopback port below the kernel's ephemeral range
// (32768 and up): a port handed out for ":0" comes from that range, where
// outbound connections may take it again before a node binds it, or while
// a killed node is down. The caller closes the listener.
func Listen() (net.Listener, error) {
	for tries := 0; tries < 1000; tries++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12768)))
		if err == nil {
			return ln, nil
		}
	}
	return nil, errors.New("no free port in 20000-32767")
}

// FreePorts returns n distinct loopback ports that were free a moment ago,
// below the ephemeral range, for processes the caller starts itself.
func FreePorts(n int) ([]int, error) {
	var ports []int
	for i := 0; i < n; i++ {
		ln, err := Listen()
		if err != nil {
			return nil, fmt.Errorf("%d free ports: %w", n, err)
		}
		defer ln.Close() // held until all are picked, so none repeats
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// DefaultStopTimeout is how long Kill and Terminate wait for the process to
// exit before they send SIGKILL (again).
const DefaultStopTimeout = 10 * time.Second

// Node is one raftlock process (across restarts). Set Bin, Args, Env,
// LogPath and StopTimeout before Start, or between a stop and a restart.
type Node struct {
	ID       string
	HTTPAddr string
	RaftAddr string
	// DebugAddr is the --debug-addr listener (Options.Debug), where a
	// raftlock_faults build takes clock faults.
	DebugAddr string
	DataDir   string
	// LogPath gets the process's stdout and stderr, appended across restarts.
	LogPath string
	Bin     string   // raftlock binary
	Args    []string // its arguments, "serve" first
	Env     []string // added to this process's environment
	// StopTimeout bounds the wait after Kill or Terminate; 0 means
	// DefaultStopTimeout.
	StopTimeout time.Duration

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	exit   int
	paused bool
}

// URL is the node's HTTP base URL.
func (n *Node) URL() string { return "http://" + n.HTTPAddr }

// Start (re)starts the process, appending to its log.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("%s already running", n.ID)
	}
	lf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	fmt.Fprintf(lf, "==== procs: starting %s at %s\n", n.ID, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(n.Bin, n.Args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), n.Env...)
	// The process dies with its parent: a crashed test or checker leaves
	// no node holding ports and data dirs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		lf.Close()
		n.mu.Lock()
		n.exit = cmd.ProcessState.ExitCode()
		n.mu.Unlock()
		close(done)
	}()
	n.cmd, n.done, n.exit, n.paused = cmd, done, -1, false
	return nil
}

// Running reports whether the process was started and not stopped since by
// Kill or Terminate (paused counts as up; so does one that exited by
// itself, see Done).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Done is closed when the process of the latest Start has exited; nil
// before the first Start.
func (n *Node) Done() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.done
}

// ExitCode is the exit code of the latest Start's process once Done is
// closed: -1 while it runs, before the first Start, or when a signal ended
// it.
func (n *Node) ExitCode() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		return -1
	}
	return n.exit
}

// Pid is the process id, 0 when down.
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Signal sends sig to the process and does not wait.
func (n *Node) Signal(sig os.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("%s is not running", n.ID)
	}
	return n.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the process to be gone.
func (n *Node) Kill() error { return n.stop(syscall.SIGKILL) }

// Terminate sends SIGTERM (a clean shutdown) and waits, sending SIGKILL
// after StopTimeout.
func (n *Node) Terminate() error { return n.stop(syscall.SIGTERM) }

func (n *Node) stop(sig syscall.Signal) error {
	n.mu.Lock()
	cmd, done, paused := n.cmd, n.done, n.paused
	timeout := n.StopTimeout
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if timeout == 0 {
		timeout = DefaultStopTimeout
	}
	cmd.Process.Signal(sig)
	if paused {
		cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-done:
	case <-time.After(timeout):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
	n.mu.Lock()
	n.cmd, n.paused = nil, false
	n.mu.Unlock()
	return nil
}

// Pause sends SIGSTOP.
func (n *Node) Pause() error {
	if err := n.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	n.mu.Lock()
	n.paused = true
	n.mu.Unlock()
	return nil
}

// Resume sends SIGCONT.
func (n *Node) Resume() error {
	n.mu.Lock()
	n.paused = false
	n.mu.Unlock()
	return n.Signal(syscall.SIGCONT)
}

// up reports whether the node runs and is not paused.
func (n *Node) up() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil && !n.paused
}

// Cluster is the set of nodes.
type Cluster struct {
	Nodes []*Node
	httpc *http.Client
}

// Options say how to run the nodes.
type Options struct {
	Bin   string   // raftlock binary
	Dir   string   // data dirs (Dir/n1) and logs (Dir/n1.log) go here
	Size  int      // nodes, default 3
	Extra []string // extra serve flags for every node
	// NodeExtra, if set, gives extra serve flags for one node, after Extra.
	NodeExtra func(n *Node) []string
	Env       []string // extra environment for every node
	Debug     bool     // give each node a --debug-addr listener
	// StopTimeout is every node's Node.StopTimeout.
	StopTimeout time.Duration
	// ReadyTimeout bounds Start's wait for a ready cluster; default 30 s.
	ReadyTimeout time.Duration
}

// Start launches the nodes and waits until every one is ready and they
// agree on a leader.
func Start(o Options) (*Cluster, error) {
	if o.Size == 0 {
		o.Size = 3
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	ports, err := FreePorts(3 * o.Size)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	c := &Cluster{httpc: &http.Client{Timeout: time.Second}}
	var peers []string
	for i := 0; i < o.Size; i++ {
		n := &Node{ID: fmt.Sprintf("n%d", i+1), HTTPAddr: addr(2 * i), RaftAddr: addr(2*i + 1),
			Bin: o.Bin, Env: o.Env, StopTimeout: o.StopTimeout}
		if o.Debug {
			n.DebugAddr = addr(2*o.Size + i)
		}
		n.DataDir = filepath.Join(o.Dir, n.ID)
		n.LogPath = filepath.Join(o.Dir, n.ID+".log")
		peers = append(peers, n.ID+"="+n.RaftAddr)
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		n.Args = append([]string{"serve", "--id", n.ID, "--data-dir", n.DataDir, "--http-addr", n.HTTPAddr,
			"--raft-addr", n.RaftAddr, "--peers", strings.Join(peers, ",")}, o.Extra...)
		if n.DebugAddr != "" {
			n.Args = append(n.Args, "--debug-addr", n.DebugAddr)
		}
		if o.NodeExtra != nil {
			n.Args = append(n.Args, o.NodeExtra(n)...)
		}
		if err := n.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.ReadyTimeout)
	defer cancel()
	if _, err := c.WaitReady(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Info is GET /v1/cluster.
type Info struct {
	Leader       string `json:"leader"`
	Term         uint64 `json:"term"`
	LastIndex    uint64 `json:"last_index"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
}

// Get fetches path from a node and decodes the JSON answer into v.
func (c *Cluster) Get(ctx context.Context, n *Node, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.URL()+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: status %d", n.ID, path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Post sends body as JSON to path on a node, and decodes a 200 answer into
// v (nil: the answer is dropped); any other status is an error that quotes
// the answer.
func (c *Cluster) Post(ctx context.Context, n *Node, path string, body, v any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.URL()+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s POST %s: status %d: %s", n.ID, path, resp.StatusCode, answer)
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(answer, v)
}

// Info asks one node about the cluster.
func (c *Cluster) Info(ctx context.Context, n *Node) (Info, error) {
	var i Info
	err := c.Get(ctx, n, "/v1/cluster", &i)
	return i, err
}

// Node returns the node with the given id.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Leader returns the node that every running, unpaused node names as the
// leader, once they agree and the leader itself says it leads.
func (c *Cluster) Leader(ctx context.Context) (*Node, error) {
	var leader string
	for _, n := range c.Nodes {
		if !n.up() {
			continue
		}
		i, err := c.Info(ctx, n)
		if err != nil {
			return nil, err
		}
		if i.Leader == "" || (leader != "" && i.Leader != leader) {
			return nil, errors.New("no agreed leader")
		}
		leader = i.Leader
	}
	if l := c.Node(leader); l != nil && l.Running() {
		return l, nil
	}
	return nil, errors.New("no leader")
}

// WaitLeader polls until every running, unpaused node names the same leader.
func (c *Cluster) WaitLeader(ctx context.Context) (*Node, error) {
	for {
		l, err := c.Leader(ctx)
		if err == nil {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no leader: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitReady polls until every running node is ready (/readyz) and they
// agree on a leader.
func (c *Cluster) WaitReady(ctx context.Context) (*Node, error) {
	for {
		l, err := c.Leader(ctx)
		if err == nil {
			ready := true
			for _, n := range c.Nodes {
				var v any
				if n.Running() && c.Get(ctx, n, "/readyz", &v) != nil {
					ready = false
				}
			}
			if ready {
				return l, nil
			}
			err = errors.New("not every node ready")
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster not ready: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close kills every node.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

// Terminate stops every node cleanly (SIGTERM), each within its
// StopTimeout.
func (c *Cluster) Terminate() {
	for _, n := range c.Nodes {
		n.Terminate()
	}
}
