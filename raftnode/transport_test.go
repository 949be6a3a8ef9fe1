package raftnode

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/raftnode/tlsconfig/tlstest"
)

// layer starts a stream layer on a loopback port; cfg nil: plaintext.
func layer(t *testing.T, cfg *tls.Config) *streamLayer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newStreamLayer(ln, ln.Addr(), cfg)
	t.Cleanup(func() { s.Close() })
	return s
}

// serveOnce accepts one connection and reports what reading from it gave:
// the bytes echoed back, or the error.
func serveOnce(s *streamLayer) <-chan error {
	res := make(chan error, 1)
	go func() {
		c, err := s.Accept()
		if err != nil {
			res <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 8)
		if _, err := io.ReadFull(c, buf); err != nil {
			res <- err
			return
		}
		_, err = c.Write(buf)
		res <- err
	}()
	return res
}

// roundTrip writes eight bytes on c and reads the echo.
func roundTrip(c net.Conn) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("pingpong")); err != nil {
		return err
	}
	buf := make([]byte, 8)
	_, err := io.ReadFull(c, buf)
	return err
}

func addr(s *streamLayer) raft.ServerAddress { return raft.ServerAddress(s.Addr().String()) }

func TestTLSStreamLayerMutual(t *testing.T) {
	ca := tlstest.NewCA(t, "raftlock test CA")
	a, b := layer(t, ca.Bundle("n1").Peer()), layer(t, ca.Bundle("n2").Peer())
	res := serveOnce(b)
	c, err := a.Dial(addr(b), 2*time.Second)
	if err != nil {
		t.Fatalf("dial between peers of one CA: %v", err)
	}
	defer c.Close()
	if err := roundTrip(c); err != nil {
		t.Fatalf("round trip: %v", err)
	}
	if err := <-res; err != nil {
		t.Fatalf("server side: %v", err)
	}
	state := c.(*tls.Conn).ConnectionState()
	if len(state.PeerCertificates) == 0 || state.PeerCertificates[0].Subject.CommonName != "n2" {
		t.Fatalf("peer certificate: %+v", state.PeerCertificates)
	}
}

func TestTLSStreamLayerRefusesStrangers(t *testing.T) {
	ca := tlstest.NewCA(t, "raftlock test CA")
	other := tlstest.NewCA(t, "another CA")
	node := ca.Bundle("n1")

	t.Run("plaintext peer dialing a TLS node", func(t *testing.T) {
		srv := layer(t, node.Peer())
		res := serveOnce(srv)
		plain := layer(t, nil)
		c, err := plain.Dial(addr(srv), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := roundTrip(c); err == nil {
			t.Fatal("a plaintext peer got an answer from a TLS node")
		}
		if err := <-res; err == nil {
			t.Fatal("the TLS node read plaintext from a peer")
		}
	})
	t.Run("TLS node dialing a plaintext peer", func(t *testing.T) {
		plain := layer(t, nil)
		go func() {
			if c, err := plain.Accept(); err == nil {
				// A plaintext Raft node reads the RPC type byte (here the
				// TLS record type, 22), knows no such RPC and hangs up.
				c.Read(make([]byte, 1))
				c.Close()
			}
		}()
		if c, err := layer(t, node.Peer()).Dial(addr(plain), 2*time.Second); err == nil {
			c.Close()
			t.Fatal("dial to a plaintext peer succeeded")
		}
	})
	t.Run("peer of another CA dialing", func(t *testing.T) {
		srv := layer(t, node.Peer())
		res := serveOnce(srv)
		// The stranger even trusts our CA: only our check of its
		// certificate can stop it.
		cfg := other.Bundle("n9").Peer()
		cfg.RootCAs = ca.Bundle("").Pool
		stranger := layer(t, cfg)
		c, err := stranger.Dial(addr(srv), 2*time.Second)
		if err == nil {
			defer c.Close()
			err = roundTrip(c)
		}
		if err == nil {
			t.Fatal("a peer with another CA's certificate got an answer")
		}
		if err := <-res; err == nil {
			t.Fatal("the node accepted a certificate of another CA")
		}
	})
	t.Run("dialing a peer of another CA", func(t *testing.T) {
		stranger := layer(t, other.Bundle("n9").Peer())
		serveOnce(stranger)
		if c, err := layer(t, node.Peer()).Dial(addr(stranger), 2*time.Second); err == nil {
			c.Close()
			t.Fatal("dial to a peer with another CA's certificate succeeded")
		}
	})
	t.Run("API client certificate of the same CA dialing", func(t *testing.T) {
		// One CA signs nodes and API clients; chaining to it
		// must not make a Raft peer.
		srv := layer(t, node.Peer())
		res := serveOnce(srv)
		c, err := layer(t, ca.ClientBundle("mallory").Peer()).Dial(addr(srv), 2*time.Second)
		if err == nil {
			defer c.Close()
			err = roundTrip(c)
		}
		if err == nil {
			t.Fatal("an API client certificate got an answer from the Raft port")
		}
		if err := <-res; err == nil || !strings.Contains(err.Error(), "not a raftlock node certificate") {
			t.Fatalf("the node accepted an API client certificate, or said not why: %v", err)
		}
	})
	t.Run("peer without a certificate", func(t *testing.T) {
		srv := layer(t, node.Peer())
		res := serveOnce(srv)
		c, err := layer(t, ca.Bundle("").Peer()).Dial(addr(srv), 2*time.Second)
		if err == nil {
			defer c.Close()
			err = roundTrip(c)
		}
		if err == nil {
			t.Fatal("a peer without a certificate got an answer")
		}
		if err := <-res; err == nil {
			t.Fatal("the node accepted a peer without a certificate")
		}
	})
}
