// Package tlstest makes throw-away certificate authorities and certificates
// for tests, in memory (ECDSA P-256, valid for a day).
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlock/raftlock/raftnode/tlsconfig"
)

// CA is a test certificate authority.
type CA struct {
	t    testing.TB
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte // the CA certificate
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("tlstest: CA: %v", err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{t: t, cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Issue makes a node certificate for name, valid as server and client, with
// name, localhost and 127.0.0.1 as subject alternative names and the
// raftlock-peer://name mark. It returns the certificate and key in PEM.
func (ca *CA) Issue(name string) (certPEM, keyPEM []byte) {
	ca.t.Helper()
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{name, "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		URIs:        []*url.URL{{Scheme: tlsconfig.PeerScheme, Host: name}},
	})
}

// IssueClient makes an API client certificate for name, as
// scripts/certs.sh --client does: client authentication only, no peer mark.
func (ca *CA) IssueClient(name string) (certPEM, keyPEM []byte) {
	ca.t.Helper()
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// ClientBundle is Bundle with an API client certificate for name.
func (ca *CA) ClientBundle(name string) *tlsconfig.Bundle {
	ca.t.Helper()
	certPEM, keyPEM := ca.IssueClient(name)
	b, err := tlsconfig.FromPEM(ca.PEM, certPEM, keyPEM)
	if err != nil {
		ca.t.Fatalf("tlstest: bundle: %v", err)
	}
	return b
}

func (ca *CA) issue(tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
	t := ca.t
	t.Helper()
	name := tmpl.Subject.CommonName
	key := newKey(t)
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("tlstest: issue %s: %v", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("tlstest: key: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// Bundle issues a certificate for name and returns it with this CA's pool.
// An empty name gives a bundle with no certificate (a plain HTTPS client).
func (ca *CA) Bundle(name string) *tlsconfig.Bundle {
	ca.t.Helper()
	var certPEM, keyPEM []byte
	if name != "" {
		certPEM, keyPEM = ca.Issue(name)
	}
	b, err := tlsconfig.FromPEM(ca.PEM, certPEM, keyPEM)
	if err != nil {
		ca.t.Fatalf("tlstest: bundle: %v", err)
	}
	return b
}

// WriteFiles writes ca.pem, NAME.pem and NAME-key.pem into dir and returns
// their paths (cert and key empty when name is).
func (ca *CA) WriteFiles(dir, name string) tlsconfig.Files {
	ca.t.Helper()
	f := tlsconfig.Files{CA: filepath.Join(dir, "ca.pem")}
	write(ca.t, f.CA, ca.PEM)
	if name != "" {
		certPEM, keyPEM := ca.Issue(name)
		f.Cert, f.Key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		write(ca.t, f.Cert, certPEM)
		write(ca.t, f.Key, keyPEM)
	}
	return f
}

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("tlstest: %v", err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatalf("tlstest: serial: %v", err)
	}
	return n
}
