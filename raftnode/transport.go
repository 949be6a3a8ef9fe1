package raftnode

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer carries Raft traffic over a listener the caller may have bound
// already (tests bind every port before any node starts, so no outbound
// connection can take a port meant for a node).
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr
}

func (s *streamLayer) Accept() (net.Conn, error) { return s.ln.Accept() }
func (s *streamLayer) Close() error              { return s.ln.Close() }
func (s *streamLayer) Addr() net.Addr            { return s.advertise }

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

// newTransport builds the Raft transport on cfg.RaftListener, or on a new
// listener at cfg.RaftAddr.
func newTransport(cfg Config) (*raft.NetworkTransport, error) {
	advertise, err := net.ResolveTCPAddr("tcp", cfg.AdvertiseRaft)
	if err != nil {
		return nil, fmt.Errorf("advertise raft address %q: %w", cfg.AdvertiseRaft, err)
	}
	if advertise.IP == nil || advertise.IP.IsUnspecified() {
		return nil, fmt.Errorf("advertise raft address %q is not dialable", cfg.AdvertiseRaft)
	}
	ln := cfg.RaftListener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.RaftAddr); err != nil {
			return nil, fmt.Errorf("raft address %s: %w", cfg.RaftAddr, err)
		}
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  &streamLayer{ln: ln, advertise: advertise},
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  cfg.Logger.Named("transport"),
	}), nil
}
