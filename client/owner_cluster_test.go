package client

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// A lease or session whose options name no owner takes the host name, as
// the CLI's --owner does; WithOwner replaces it, and WithOwner("") sends
// none.
func TestClusterDefaultOwnerIsHostName(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Skip("no host name:", err)
	}
	cl := testenv.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"default", nil, host},
		{"WithOwner", []Option{WithOwner("batch-7")}, "batch-7"},
		{"WithOwner empty", []Option{WithOwner("")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(cl.Endpoints(), append(tc.opts, WithRequestTimeout(2*time.Second))...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			lease, err := c.TryAcquire(ctx, "owner/"+tc.name, AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Release(ctx)
			info, err := c.Get(ctx, "owner/"+tc.name, false)
			if err != nil {
				t.Fatal(err)
			}
			if lease.Owner() != tc.want || info.Owner != tc.want {
				t.Errorf("owner %q (read back %q), want %q", lease.Owner(), info.Owner, tc.want)
			}
			sess, err := NewSession(ctx, c, SessionOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close(ctx)
			if sess.Owner() != tc.want {
				t.Errorf("session owner %q, want %q", sess.Owner(), tc.want)
			}
			// An explicit owner always wins.
			l2, err := c.TryAcquire(ctx, "owner/explicit/"+tc.name, AcquireOptions{TTL: time.Minute, Owner: "me"})
			if err != nil || l2.Owner() != "me" {
				t.Fatalf("explicit owner: %v %v", l2, err)
			}
			l2.Release(ctx)
		})
	}
}

// AttachSession keeps alive a session made elsewhere; a lock taken through
// it belongs to that session, with its owner; Detach leaves both to the
// session's maker, and an ended session cannot be attached.
func TestClusterAttachSession(t *testing.T) {
	cl := testenv.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	maker, other := newClusterClient(t, cl.Endpoints()), newClusterClient(t, cl.Endpoints())
	sess, err := NewSession(ctx, maker, SessionOptions{TTL: 10 * time.Second, Owner: "ingest-7"})
	if err != nil {
		t.Fatal(err)
	}
	att, err := other.AttachSession(ctx, sess.ID())
	if err != nil {
		t.Fatal(err)
	}
	if att.Owner() != "ingest-7" || att.TTL() != 10*time.Second {
		t.Errorf("attached session: owner %q, TTL %s; want the maker's", att.Owner(), att.TTL())
	}
	lease, err := att.TryAcquire(ctx, "attached/a", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Owner() != "ingest-7" {
		t.Errorf("lease owner %q, want the session's", lease.Owner())
	}
	att.Detach()
	select {
	case <-lease.Done():
		if !errors.Is(context.Cause(lease.Context()), ErrDetached) {
			t.Errorf("lease ended with %v, want ErrDetached", context.Cause(lease.Context()))
		}
	default:
		t.Error("the lease is still kept by a detached session")
	}
	if err := att.Close(ctx); err != nil {
		t.Errorf("Close after Detach: %v, want nothing done", err)
	}
	info, err := maker.Session(ctx, sess.ID())
	if err != nil || len(info.Leases) != 1 {
		t.Fatalf("the maker's session after Detach: %+v %v, want it open with the lease", info, err)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.AttachSession(ctx, sess.ID()); !errors.Is(err, ErrNoSession) {
		t.Errorf("attach to a closed session: %v, want ErrNoSession", err)
	}
}
