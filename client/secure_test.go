package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode/tlsconfig/tlstest"
)

// The client against a cluster with TLS and tokens: https to host:port
// endpoints, the token on every request (renewals included), and 401/403 as
// ErrUnauthorized/ErrForbidden without retries.
func TestClientTLSAndToken(t *testing.T) {
	const admin, rw, ro = "admin-token-0123456789abcdef", "rw-token-0123456789abcdef", "ro-token-0123456789abcdef"
	cl := testenv.Start(t, 3, testenv.Options{
		TLS:    tlstest.NewCA(t, "client test CA"),
		Tokens: admin + " admin\n" + rw + " read-write\n" + ro + " read-only\n",
	})
	var hostPorts []string
	for _, n := range cl.Nodes {
		hostPorts = append(hostPorts, n.HTTPAddr)
	}
	newClient := func(token string) *Client {
		c, err := New(hostPorts, WithTLSConfig(cl.ClientTLS()), WithToken(token), WithRequestTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c := newClient(rw)
	for _, ep := range c.Endpoints() {
		if !strings.HasPrefix(ep, "https://") {
			t.Fatalf("endpoint %s: want https", ep)
		}
	}
	lease, err := c.TryAcquire(ctx, "secure/1", AcquireOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	holdFor(t, lease, 2500*time.Millisecond) // the watchdog's renewals carry the token too
	if info, err := newClient(ro).Get(ctx, "secure/1", false); err != nil || info.Token != lease.Token() {
		t.Fatalf("read-only get: %+v %v", info, err)
	}

	start := time.Now()
	_, err = newClient("").TryAcquire(ctx, "secure/2", AcquireOptions{})
	if !errors.Is(err, ErrUnauthorized) {
		t.Errorf("acquire without a token: %v, want ErrUnauthorized", err)
	}
	_, err = newClient(ro).TryAcquire(ctx, "secure/2", AcquireOptions{})
	if !errors.Is(err, ErrForbidden) {
		t.Errorf("acquire with a read-only token: %v, want ErrForbidden", err)
	}
	if _, err := c.TransferLeadership(ctx, ""); !errors.Is(err, ErrForbidden) {
		t.Errorf("transfer with a read-write token: %v, want ErrForbidden", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("refusals took %v: they must not be retried", d)
	}
	if _, err := newClient(admin).TransferLeadership(ctx, ""); err != nil {
		t.Errorf("transfer with an admin token: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
}
