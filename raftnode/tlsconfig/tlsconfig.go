// Package tlsconfig loads raftlock's certificates (PEM files: a node or
// client certificate, its key, and the CA that signed every party) and builds
// the three tls.Configs the project uses: the HTTPS server, an HTTPS client,
// and the mutual-TLS peer config of the Raft transport.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

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
// certificate. So a peer without a certificate from this CA is refused in
// both directions.
func (b *Bundle) Peer() *tls.Config {
	c := b.Client()
	c.ClientCAs = b.Pool
	c.ClientAuth = tls.RequireAndVerifyClientCert
	return c
}
