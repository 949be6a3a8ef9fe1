package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/raftnode/tlsconfig/tlstest"
)

// A member reports its own progress on GET /v1/cluster, and ProgressFetcher
// reads it over https with the node's token, as the leader's promoter does.
func TestProgressFetcher(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	f := newLeader("n4")
	f.status = func() (raftnode.Status, error) {
		return raftnode.Status{ID: "n4", Leader: "n1", Term: 7, LastIndex: 42, CommitIndex: 40, AppliedIndex: 39}, nil
	}
	srv := httptest.NewUnstartedServer(New(f, Options{Tokens: testTokens(t), Metrics: http.NotFoundHandler()}))
	srv.TLS = ca.Bundle("n4").Server(false)
	srv.StartTLS()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "https://")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	got, err := ProgressFetcher(ca.Bundle("n1").Client(), tokAdmin)(ctx, "n4", addr)
	if want := (raftnode.Progress{ID: "n4", Leader: "n1", Term: 7, LastIndex: 42, CommandVersion: fsm.MaxCommandVersion}); err != nil || got != want {
		t.Fatalf("progress: %+v %v, want %+v", got, err, want)
	}
	// A read-only token is enough to read it.
	if _, err := ProgressFetcher(ca.Bundle("n1").Client(), tokRO)(ctx, "n4", addr); err != nil {
		t.Fatalf("with a read-only token: %v", err)
	}
	// No token, or no TLS: an error, never a zero report taken as progress.
	if _, err := ProgressFetcher(ca.Bundle("n1").Client(), "")(ctx, "n4", addr); err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), tokAdmin) {
		t.Fatalf("without a token: %v", err)
	}
	if _, err := ProgressFetcher(nil, tokAdmin)(ctx, "n4", addr); err == nil {
		t.Fatal("plain HTTP to a TLS member did not fail")
	}
	// It gives up when its context ends.
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	if _, err := ProgressFetcher(ca.Bundle("n1").Client(), tokAdmin)(done, "n4", addr); !errors.Is(err, context.Canceled) {
		t.Fatalf("with a cancelled context: %v", err)
	}
}

// An unsafe membership change is 409 unsafe_change with the node's reason.
func TestMembershipRefusals(t *testing.T) {
	f := newLeader("n1")
	s := New(f, Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler()})
	f.leave = func(ctx context.Context, id string) error {
		return fmt.Errorf("%w: removing n2 would leave 2 voters of which 1 follow this leader", raftnode.ErrUnsafeChange)
	}
	rec := do(t, s, "POST", "/v1/cluster/leave", `{"id":"n2"}`)
	wantError(t, rec, http.StatusConflict, "unsafe_change", "removing n2")
	f.join = func(ctx context.Context, id, raftAddr, httpAddr string) error {
		return fmt.Errorf("%w: x at 127.0.0.1:9002 would replace n2", raftnode.ErrUnsafeChange)
	}
	rec = do(t, s, "POST", "/v1/cluster/join", `{"id":"x","raft_addr":"127.0.0.1:9002"}`)
	wantError(t, rec, http.StatusConflict, "unsafe_change", "would replace n2")
}

// An operator's on-demand state check runs on the leader and answers the
// index every replica hashes its state at; its errors map like any write's.
func TestCheckStateEndpoint(t *testing.T) {
	f := newLeader("n1")
	f.checkState = func(context.Context) (uint64, error) { return 42, nil }
	rec := do(t, newServer(f), http.MethodPost, "/v1/cluster/check-state", `{}`)
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"index":42}` {
		t.Fatalf("check-state answered %d %s, want 200 {\"index\":42}", rec.Code, rec.Body)
	}
	f.checkState = func(context.Context) (uint64, error) { return 0, raftnode.ErrDiverged }
	rec = do(t, newServer(f), http.MethodPost, "/v1/cluster/check-state", `{}`)
	wantError(t, rec, http.StatusServiceUnavailable, api.CodeDiverged, "")
}

// A transfer that cannot change anything says why: 409 no_successor with no
// other voter, and a transfer to the node that leads answers at once with
// that node, never waiting for a successor that will not come.
func TestTransferLeadershipThatChangesNothing(t *testing.T) {
	f := newLeader("n1")
	f.transfer = func(context.Context, string) error {
		return fmt.Errorf("%w: n1 is the only voter", raftnode.ErrNoSuccessor)
	}
	rec := do(t, newServer(f), http.MethodPost, "/v1/cluster/transfer-leadership", `{}`)
	wantError(t, rec, http.StatusConflict, api.CodeNoSuccessor, "n1 is the only voter")

	f.transfer = func(_ context.Context, id string) error {
		return fmt.Errorf("%w: %s", raftnode.ErrLeadsAlready, id)
	}
	s := New(f, Options{LeaderWait: time.Hour, Metrics: http.NotFoundHandler()})
	rec = do(t, s, http.MethodPost, "/v1/cluster/transfer-leadership", `{"id":"n1"}`)
	wantJSON(t, rec, http.StatusOK, `{"leader":"n1","message":"n1 leads already; nothing changed"}`)
}
