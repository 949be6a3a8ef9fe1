// Package tlsconfig loads raftlock's certificates (PEM files: a node or
// client certificate, its key, and the CA that signed every party) and builds
// the three tls.Configs the project uses: the HTTPS server, an HTTPS client,
// and the mutual-TLS peer config of the Raft transport.
//
// One CA signs node and API client certificates alike, so chaining to the CA
// cannot be what makes a Raft peer: a node certificate also carries a URI
// subject alternative name raftlock-peer://NAME (PeerScheme), which client
// certificates never have, and the Raft transport demands it on both ends.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// PeerScheme is the URI scheme of the subject alternative name that marks a
// node certificate: raftlock-peer://NAME. scripts/certs.sh writes it into
// node certificates and never into client ones (--client).
const PeerScheme = "raftlock-peer"

// PeerName returns the NAME of cert's raftlock-peer://NAME URI, and whether
// it has one: only node certificates do.
func PeerName(cert *x509.Certificate) (string, bool) {
	for _, u := range cert.URIs {
		if u.Scheme == PeerScheme && u.Host != "" {
			return u.Host, true
		}
	}
	return "", false
}

// errNotPeer says why a certificate is not a node's, and what to do when the
// certificate is a node's made before the peer mark existed.
func errNotPeer(cert *x509.Certificate) error {
	return fmt.Errorf("certificate %q is not a raftlock node certificate: it has no %s://NAME subject alternative name. "+
		"API client certificates are refused on the Raft port; a node certificate made by an older scripts/certs.sh "+
		"lacks the mark: re-run scripts/certs.sh DIR NAME... (it reissues such node certificates) and restart the node",
		cert.Subject.CommonName, PeerScheme)
}

// CheckNode reports whether the bundle's own certificate is a node
// certificate, so that a node with an unmarked one refuses to start with the
// reason instead of failing every Raft handshake.
func (b *Bundle) CheckNode() error {
	if b.Cert == nil {
		return errors.New("a node needs a certificate")
	}
	leaf := b.Cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(b.Cert.Certificate[0]); err != nil {
			return fmt.Errorf("parse certificate: %w", err)
		}
	}
	if _, ok := PeerName(leaf); !ok {
		return errNotPeer(leaf)
	}
	return nil
}

// Files names the PEM files. CA is required; Cert and Key go together.
type Files struct {
	Cert, Key, CA string
}

// Bundle is a loaded certificate (optional for clients) and the CA pool that
// every peer's certificate must chain to.
type Bundle struct {
	Cert *tls.Certificate
	Pool *x509.CertPool
}

// Load reads f. A client may leave Cert and Key empty; a node may not.
func Load(f Files) (*Bundle, error) {
	if f.CA == "" {
		return nil, errors.New("a CA file is required with TLS")
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("a certificate and its key go together")
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	b := &Bundle{Pool: x509.NewCertPool()}
	if !b.Pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", f.CA)
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("certificate %s / key %s: %w", f.Cert, f.Key, err)
		}
		b.Cert = &cert
	}
	return b, nil
}

// FromPEM builds a Bundle from PEM bytes; certPEM and keyPEM may be empty.
func FromPEM(caPEM, certPEM, keyPEM []byte) (*Bundle, error) {
	b := &Bundle{Pool: x509.NewCertPool()}
	if !b.Pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no PEM certificate in the CA")
	}
	if len(certPEM) > 0 {
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, err
		}
		b.Cert = &cert
	}
	return b, nil
}

func (b *Bundle) certs() []tls.Certificate {
	if b.Cert == nil {
		return nil
	}
	return []tls.Certificate{*b.Cert}
}

// Server is the HTTPS API's config. With requireClientCert, a client must
// present a certificate signed by the CA; otherwise one is checked only if
// given (authentication is then by bearer token).
func (b *Bundle) Server(requireClientCert bool) *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if requireClientCert {
		auth = tls.RequireAndVerifyClientCert
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: b.certs(),
		ClientCAs:    b.Pool,
		ClientAuth:   auth,
	}
}

// Client is an HTTPS client's config: servers must chain to the CA and match
// the host dialled; the certificate, if any, is offered as a client
// certificate.
func (b *Bundle) Client() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: b.certs(),
		RootCAs:      b.Pool,
	}
}

// Peer is the Raft transport's config, used on both ends of a connection:
// as a server it demands a client certificate signed by the CA, as a client
// it verifies the server against the CA and offers the same node
// certificate. Either way the other end's certificate must also carry the
// raftlock-peer mark: an API client certificate from the same CA is refused.
func (b *Bundle) Peer() *tls.Config {
	c := b.Client()
	c.ClientCAs = b.Pool
	c.ClientAuth = tls.RequireAndVerifyClientCert
	c.VerifyConnection = verifyPeer
	return c
}

// verifyPeer runs after the chain is verified, on both ends.
func verifyPeer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("raft peer presented no certificate")
	}
	if _, ok := PeerName(cs.PeerCertificates[0]); !ok {
		return errNotPeer(cs.PeerCertificates[0])
	}
	return nil
}
