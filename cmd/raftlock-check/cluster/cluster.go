// Package cluster runs a cluster of real "raftlock serve" processes on
// loopback ports, and kills, pauses, resumes and restarts them.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// Node is one raftlock process (across restarts).
type Node struct {
	ID       string
	HTTPAddr string
	RaftAddr string
	// DebugAddr is the --debug-addr listener (Options.Debug), where a
	// raftlock_faults build takes clock faults.
	DebugAddr string
	DataDir   string
	LogPath   string
	args      []string
	env       []string
	bin       string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
}

// Cluster is the set of nodes.
type Cluster struct {
	Nodes []*Node
	httpc *http.Client
}

// Options say how to run the nodes.
type Options struct {
	Bin   string   // raftlock binary
	Dir   string   // data dirs and logs go here
	Size  int      // nodes, default 3
	Extra []string // extra serve flags for every node
	Env   []string // extra environment for every node
	Debug bool     // give each node a --debug-addr listener
}

// freePorts picks n loopback ports that are free now, below the kernel's
// ephemeral range (32768 and up): a port handed out for ":0" comes from that
// range, where the suite's own outbound connections may take it again before
// a node binds it, or while a killed node is down.
func freePorts(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no %d free ports in 20000-32767", n)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12768)))
		if err != nil {
			continue
		}
		lns = append(lns, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// Start launches the nodes and waits until the cluster has a leader.
func Start(o Options) (*Cluster, error) {
	if o.Size == 0 {
		o.Size = 3
	}
	ports, err := freePorts(3 * o.Size)
	if err != nil {
		return nil, err
	}
	c := &Cluster{httpc: &http.Client{Timeout: time.Second}}
	var peers []string
	for i := 0; i < o.Size; i++ {
		n := &Node{ID: fmt.Sprintf("n%d", i+1), HTTPAddr: ports[2*i], RaftAddr: ports[2*i+1], bin: o.Bin, env: o.Env}
		if o.Debug {
			n.DebugAddr = ports[2*o.Size+i]
		}
		n.DataDir = filepath.Join(o.Dir, n.ID)
		n.LogPath = filepath.Join(o.Dir, n.ID+".log")
		peers = append(peers, n.ID+"="+n.RaftAddr)
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		n.args = append([]string{"serve", "--id", n.ID, "--data-dir", n.DataDir, "--http-addr", n.HTTPAddr,
			"--raft-addr", n.RaftAddr, "--peers", strings.Join(peers, ",")}, o.Extra...)
		if n.DebugAddr != "" {
			n.args = append(n.args, "--debug-addr", n.DebugAddr)
		}
		if err := n.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.WaitReady(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
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
		return err
	}
	fmt.Fprintf(lf, "==== raftlock-check: starting %s at %s\n", n.ID, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(n.bin, n.args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), n.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); lf.Close(); close(done) }()
	n.cmd, n.done, n.paused = cmd, done, false
	return nil
}

// Running reports whether the process is up (paused counts as up).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
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

func (n *Node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("%s is not running", n.ID)
	}
	return n.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the process to be gone.
func (n *Node) Kill() error { return n.stop(syscall.SIGKILL) }

// Terminate sends SIGTERM (a clean shutdown) and waits.
func (n *Node) Terminate() error { return n.stop(syscall.SIGTERM) }

func (n *Node) stop(sig syscall.Signal) error {
	n.mu.Lock()
	cmd, done, paused := n.cmd, n.done, n.paused
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(sig)
	if paused {
		cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
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
	if err := n.signal(syscall.SIGSTOP); err != nil {
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
	return n.signal(syscall.SIGCONT)
}

// Info is GET /v1/cluster.
type Info struct {
	Leader       string `json:"leader"`
	Term         uint64 `json:"term"`
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
		n.mu.Lock()
		up := n.cmd != nil && !n.paused
		n.mu.Unlock()
		if !up {
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
