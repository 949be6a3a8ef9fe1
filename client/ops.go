package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/api"
)

// LockInfo is the public state of a lock, as Get and List show it. The lease
// id is never shown.
type LockInfo struct {
	Name  string
	Held  bool
	Owner string
	Token uint64 // fencing token of the holding lease
	TTL   time.Duration
	Value string // what the holder published
	Index uint64 // Raft index of the lock's last change (see Observe)
	// Shared: the lock is held in shared mode; Owner, Token and TTL are
	// then the lowest-token holder's, and Holders lists every holder by
	// token. Holders is nil for a lock held exclusive.
	Shared  bool
	Holders []Holder
}

// lockInfo is a lock of a read's answer (api.Lock, or api.FreeLock decoded
// into it) as a LockInfo.
func lockInfo(j *api.Lock) LockInfo {
	info := LockInfo{Name: j.Name, Held: j.Held, Owner: j.Owner, Token: j.FencingToken, TTL: time.Duration(j.TTLMs) * time.Millisecond, Value: j.Value, Index: j.Index,
		Shared: j.Mode == api.ModeShared}
	for _, h := range j.Holders {
		info.Holders = append(info.Holders, Holder{Owner: h.Owner, Token: h.FencingToken, TTL: msDuration(h.TTLMs), Remaining: remaining(h.RemainingMs)})
	}
	return info
}

// LockList is the answer of List.
type LockList struct {
	Locks     []LockInfo // held locks, sorted by name
	Truncated bool       // more locks match than were returned
	Index     uint64     // the highest index of any change under the prefix
}

// ClusterStatus is the answer of GET /v1/cluster.
type ClusterStatus struct {
	Leader       string `json:"leader"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Nodes        []Node `json:"nodes"`
}

// Node is a member of the cluster.
type Node struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	Voter    bool   `json:"voter"`
	Leader   bool   `json:"leader"`
}

// Get returns the state of lock name. With stale false the answer is
// linearizable (the leader answers after confirming it leads); with stale
// true any node answers from its own, possibly lagging, state.
func (c *Client) Get(ctx context.Context, name string, stale bool) (*LockInfo, error) {
	r := request{method: http.MethodGet, path: "/v1/locks/" + url.PathEscape(name), leader: !stale, idempotent: true}
	if stale {
		r.query = "stale=true"
	}
	var j api.Lock
	if _, err := c.do(ctx, r, &j); err != nil {
		return nil, err
	}
	info := lockInfo(&j)
	return &info, nil
}

// List returns the held locks whose names start with prefix, sorted by name,
// at most limit of them (0: the server's default).
func (c *Client) List(ctx context.Context, prefix string, limit int) (*LockList, error) {
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var j api.LockList
	r := request{method: http.MethodGet, path: "/v1/locks", query: q.Encode(), leader: true, idempotent: true}
	if _, err := c.do(ctx, r, &j); err != nil {
		return nil, err
	}
	l := &LockList{Truncated: j.Truncated, Index: j.Index, Locks: make([]LockInfo, 0, len(j.Locks))}
	for i := range j.Locks {
		l.Locks = append(l.Locks, lockInfo(&j.Locks[i]))
	}
	return l, nil
}

// Cluster returns the cluster's status. The client also learns the nodes'
// addresses from it.
func (c *Client) Cluster(ctx context.Context) (*ClusterStatus, error) {
	var cs ClusterStatus
	r := request{method: http.MethodGet, path: "/v1/cluster", idempotent: true}
	if _, err := c.do(ctx, r, &cs); err != nil {
		return nil, err
	}
	c.learnCluster(&cs)
	return &cs, nil
}

// Join adds a node to the cluster as a voter.
func (c *Client) Join(ctx context.Context, id, raftAddr, httpAddr string) error {
	body := api.JoinRequest{ID: id, RaftAddr: raftAddr, HTTPAddr: httpAddr}
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/cluster/join", body: body, leader: true, idempotent: true}, nil)
	return err
}

// Leave removes a node from the cluster.
func (c *Client) Leave(ctx context.Context, id string) error {
	body := api.LeaveRequest{ID: id}
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/cluster/leave", body: body, leader: true, idempotent: true}, nil)
	return err
}

// TransferLeadership asks the leader to hand leadership to node id, or to any
// other voter if id is "". It returns once another node leads, with that
// node's id ("" if the old leader had not yet heard who won). It is not
// resent after an ambiguous failure, since that could move leadership twice.
func (c *Client) TransferLeadership(ctx context.Context, id string) (string, error) {
	body := api.TransferRequest{ID: id}
	var out api.Transferred
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/cluster/transfer-leadership", body: body, leader: true}, &out)
	return out.Leader, err
}

// CheckState asks the leader to compare every replica's state now (an
// operator's on-demand check) and returns the index every replica hashes its
// state at. A replica whose state differs reports it on /readyz and in its
// log, and answers 503 state_diverged from then on.
func (c *Client) CheckState(ctx context.Context) (uint64, error) {
	var out api.StateChecked
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/cluster/check-state", body: api.CheckStateRequest{}, leader: true, idempotent: true}, &out)
	return out.Index, err
}

// Health checks that the node at endpoint serves (GET /healthz). An empty
// endpoint means the first one given to New. It asks once, without retries or
// failover, since it is about that node.
func (c *Client) Health(ctx context.Context, endpoint string) error {
	return c.probe(ctx, endpoint, "/healthz")
}

// Ready checks that the node at endpoint knows a leader and has caught up
// with the log (GET /readyz). An empty endpoint means the first one given to
// New. It asks once, without retries or failover.
func (c *Client) Ready(ctx context.Context, endpoint string) error {
	return c.probe(ctx, endpoint, "/readyz")
}

func (c *Client) probe(ctx context.Context, endpoint, path string) error {
	u := ""
	if endpoint == "" {
		c.mu.Lock()
		u = c.endpoints[0]
		c.mu.Unlock()
	} else {
		var err error
		if u, err = normalizeEndpoint(endpoint, c.scheme); err != nil {
			return err
		}
	}
	resp, err := c.send(ctx, u, request{method: http.MethodGet, path: path}, nil)
	if err != nil {
		return fmt.Errorf("raftlock: GET %s: %w", u+path, err)
	}
	if resp.status != http.StatusOK {
		return c.parseError(resp, "")
	}
	return nil
}
