package httpapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// cluster answers from this node's view, on any node.
func (s *Server) cluster(w http.ResponseWriter, r *http.Request) {
	st, err := s.store.Status()
	if err != nil {
		writeError(w, err)
		return
	}
	v := api.Cluster{ID: st.ID, Leader: st.Leader, Term: st.Term, LastIndex: st.LastIndex, CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex,
		CommandVersion: fsm.MaxCommandVersion, ClusterID: st.ClusterID, Nodes: []api.Node{}}
	for _, n := range st.Nodes {
		v.Nodes = append(v.Nodes, api.Node{ID: n.ID, RaftAddr: n.RaftAddr, HTTPAddr: n.HTTPAddr, Voter: n.Voter, Leader: n.Leader})
	}
	writeJSON(w, http.StatusOK, v)
}

// ProgressFetcher returns the function the leader asks members for their own
// progress with (raftnode.Config.FetchProgress): GET /v1/cluster on the
// member's API, over https with tlsCfg when set, with token when set, as
// the forwarder calls the leader. Connections are not kept: members are
// asked once per round, and a pool must not outlive a closed node.
func ProgressFetcher(tlsCfg *tls.Config, token string) nodeapi.ProgressFetcher {
	hc, scheme := memberClient(tlsCfg)
	return func(ctx context.Context, id, httpAddr string) (nodeapi.Progress, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+httpAddr+"/v1/cluster", nil)
		if err != nil {
			return nodeapi.Progress{}, fmt.Errorf("progress of %s: %w", id, err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nodeapi.Progress{}, fmt.Errorf("progress of %s: %w", id, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nodeapi.Progress{}, fmt.Errorf("progress of %s at %s: status %d", id, httpAddr, resp.StatusCode)
		}
		var v api.Cluster
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v); err != nil {
			return nodeapi.Progress{}, fmt.Errorf("progress of %s at %s: %w", id, httpAddr, err)
		}
		return nodeapi.Progress{ID: v.ID, Leader: v.Leader, Term: v.Term, LastIndex: v.LastIndex, CommandVersion: v.CommandVersion}, nil
	}
}

// memberClient is the client nodes ask each other with: https with tlsCfg
// when set, and no kept connections.
func memberClient(tlsCfg *tls.Config) (*http.Client, string) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableKeepAlives = true
	scheme := "http://"
	if tlsCfg != nil {
		t.TLSClientConfig, scheme = tlsCfg.Clone(), "https://"
	}
	return &http.Client{Transport: t}, scheme
}

// memberTimeout bounds each member's answers to GET /v1/cluster/members: a
// down member costs the page one second, not the request timeout.
const memberTimeout = time.Second

// members answers GET /v1/cluster/members: every member's own view of its
// progress and readiness, asked in parallel over the members' APIs (which
// a browser on one node cannot reach). The caller's Authorization header is
// passed on, so the answer shows no more than the caller's token may read.
func (s *Server) members(w http.ResponseWriter, r *http.Request) {
	st, err := s.store.Status()
	if err != nil {
		writeError(w, err)
		return
	}
	hc, scheme := memberClient(s.opts.ForwardTLS) // per request: no pool to outlive the node
	auth := r.Header.Get("Authorization")
	out := make([]api.Member, len(st.Nodes))
	last := make([]uint64, len(st.Nodes))
	var wg sync.WaitGroup
	for i, n := range st.Nodes {
		out[i] = api.Member{ID: n.ID, RaftAddr: n.RaftAddr, HTTPAddr: n.HTTPAddr, Voter: n.Voter, Leader: n.Leader}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			last[i] = askMember(r.Context(), hc, scheme, auth, &out[i])
		}(i)
	}
	wg.Wait()
	// Lag against the leader's log, when the leader answered.
	var leaderLast uint64
	known := false
	for i, m := range out {
		if m.Leader && m.Reachable {
			leaderLast, known = last[i], true
		}
	}
	for i := range out {
		if known && out[i].Reachable {
			lag := uint64(0)
			if leaderLast > out[i].AppliedIndex {
				lag = leaderLast - out[i].AppliedIndex
			}
			out[i].Lag = &lag
		}
	}
	writeJSON(w, http.StatusOK, api.Members{Members: out})
}

// askMember fills m from the member's GET /v1/cluster and GET /readyz and
// returns the member's last log index (0 when it did not answer).
func askMember(ctx context.Context, hc *http.Client, scheme, auth string, m *api.Member) uint64 {
	if m.HTTPAddr == "" {
		m.Error = "no http address known"
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, memberTimeout)
	defer cancel()
	get := func(path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+m.HTTPAddr+path, nil)
		if err != nil {
			return nil, err
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		return hc.Do(req)
	}
	var ready bool
	readyDone := make(chan struct{})
	go func() {
		defer close(readyDone)
		resp, err := get("/readyz")
		if err != nil {
			return
		}
		defer resp.Body.Close()
		var v api.Ready
		if json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&v) == nil {
			ready = resp.StatusCode == http.StatusOK && v.Ready
		}
	}()
	defer func() { <-readyDone; m.Ready = ready && m.Reachable }()
	resp, err := get("/v1/cluster")
	if err != nil {
		m.Error = fmt.Sprintf("asking %s: %v", m.HTTPAddr, err)
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		m.Error = fmt.Sprintf("asking %s: status %d", m.HTTPAddr, resp.StatusCode)
		return 0
	}
	var v api.Cluster
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v); err != nil {
		m.Error = fmt.Sprintf("asking %s: %v", m.HTTPAddr, err)
		return 0
	}
	m.Reachable = true
	m.Term, m.CommitIndex, m.AppliedIndex = v.Term, v.CommitIndex, v.AppliedIndex
	return v.LastIndex
}

// membershipError gives a membership refusal its status: 400 naming the
// field for a malformed member, 409 for an unsafe change.
func membershipError(err error) error {
	var me *nodeapi.MemberError
	switch {
	case errors.As(err, &me):
		return badRequest("%s", me.Error())
	case errors.Is(err, nodeapi.ErrUnsafeChange):
		return &apiError{http.StatusConflict, api.CodeUnsafeChange, err.Error()}
	}
	return err
}

func (s *Server) join(ctx context.Context, req *joinRequest) (int, any, error) {
	// Checked here too, so a follower answers 400 without forwarding.
	if err := nodeapi.ValidateMember(req.ID, req.RaftAddr, req.HTTPAddr); err != nil {
		return 0, nil, membershipError(err)
	}
	if err := s.store.Join(ctx, req.ID, req.RaftAddr, req.HTTPAddr); err != nil {
		return 0, nil, membershipError(err)
	}
	s.log.Info("node joined", "id", req.ID, "raft_addr", req.RaftAddr, "http_addr", req.HTTPAddr)
	return http.StatusOK, api.Joined{Joined: req.ID}, nil
}

func (s *Server) leave(ctx context.Context, req *leaveRequest) (int, any, error) {
	if err := s.store.Leave(ctx, req.ID); err != nil {
		return 0, nil, membershipError(err)
	}
	s.log.Info("node left", "id", req.ID)
	return http.StatusOK, api.Left{Left: req.ID}, nil
}

func (s *Server) transfer(ctx context.Context, req *transferRequest) (int, any, error) {
	err := s.store.TransferLeadership(ctx, req.ID)
	switch {
	case errors.Is(err, nodeapi.ErrLeadsAlready):
		// What was asked holds already: answered as done, and not waited for
		// another leader (successor), which would never come.
		return http.StatusOK, api.Transferred{Leader: req.ID, Message: req.ID + " leads already; nothing changed"}, nil
	case errors.Is(err, nodeapi.ErrNoSuccessor):
		return 0, nil, &apiError{http.StatusConflict, api.CodeNoSuccessor, err.Error() + "; nothing changed (join another voter first)"}
	case err != nil:
		return 0, nil, err
	}
	return http.StatusOK, api.Transferred{Leader: s.successor(ctx)}, nil
}

// checkState asks the leader to compare every replica's state (an operator's
// on-demand check; the leader also runs one every --state-check-interval).
func (s *Server) checkState(ctx context.Context, _ *checkRequest) (int, any, error) {
	index, err := s.store.CheckState(ctx)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.StateChecked{Index: index}, nil
}

// successor waits (up to LeaderWait) until this node, which just handed
// leadership over, hears who leads now; "" if it has not heard by then.
func (s *Server) successor(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, s.opts.LeaderWait)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if id, _ := s.store.Leader(); id != "" && id != s.store.ID() {
			return id
		}
		select {
		case <-ctx.Done():
			return ""
		case <-t.C:
		}
	}
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if !s.store.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, api.Ready{Ready: false})
		return
	}
	writeJSON(w, http.StatusOK, api.Ready{Ready: true})
}
