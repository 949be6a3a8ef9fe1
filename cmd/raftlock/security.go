package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/raftlock/raftlock/httpapi"
	"github.com/raftlock/raftlock/raftnode/tlsconfig"
)

// securityFlags are serve's TLS and authentication flags.
type securityFlags struct {
	files         tlsconfig.Files
	verifyClients bool
	authTokens    string
	joinToken     string
}

func addSecurityFlags(fs *flag.FlagSet) *securityFlags {
	s := &securityFlags{}
	fs.StringVar(&s.files.Cert, "tls-cert", "", "PEM certificate of this node: HTTPS for the API, and mutual TLS for Raft (with --tls-key, --tls-ca)")
	fs.StringVar(&s.files.Key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&s.files.CA, "tls-ca", "", "PEM CA that signed every node's certificate (and client certificates; only node certificates, with a raftlock-peer:// URI, pass on the Raft port)")
	fs.BoolVar(&s.verifyClients, "tls-verify-clients", false, "require API clients to present a certificate signed by --tls-ca")
	fs.StringVar(&s.authTokens, "auth-tokens", "", `file of bearer tokens, lines "TOKEN ROLE [NAME] [prefix=P ...]" (ROLE read-only, read-write, admin; prefix=P limits the token to names under P); unset: no authentication`)
	fs.StringVar(&s.joinToken, "join-token", "", "admin token this node sends for its own join (default: the first admin token of --auth-tokens)")
	return s
}

// apply loads the files the flags name into c.
func (s *securityFlags) apply(c *serveConfig) error {
	f := s.files
	if f.Cert != "" || f.Key != "" || f.CA != "" {
		if f.Cert == "" || f.Key == "" || f.CA == "" {
			return errors.New("--tls-cert, --tls-key and --tls-ca go together")
		}
		b, err := tlsconfig.Load(f)
		if err != nil {
			return fmt.Errorf("--tls-*: %w", err)
		}
		if err := b.CheckNode(); err != nil {
			return fmt.Errorf("--tls-cert %s: %w", f.Cert, err)
		}
		c.apiTLS = b.Server(s.verifyClients)
		c.forwardTLS = b.Client()
		c.node.RaftTLS = b.Peer()
		if strings.HasPrefix(c.node.Join, "http://") {
			return fmt.Errorf("--join %s: the cluster uses TLS; use https://", c.node.Join)
		}
	} else if s.verifyClients {
		return errors.New("--tls-verify-clients needs --tls-cert, --tls-key and --tls-ca")
	}
	if s.authTokens == "" {
		if s.joinToken != "" {
			return errors.New("--join-token needs --auth-tokens")
		}
		return nil
	}
	if err := checkSecretMode(s.authTokens); err != nil {
		return fmt.Errorf("--auth-tokens: %w", err)
	}
	toks, err := httpapi.LoadTokens(s.authTokens)
	if err != nil {
		return fmt.Errorf("--auth-tokens: %w", err)
	}
	c.tokens = toks
	c.nodeToken = s.joinToken
	if c.nodeToken == "" {
		c.nodeToken = toks.AdminToken()
	}
	if c.nodeToken == "" {
		return errors.New("--auth-tokens: no admin token in plain text for this node's own join; add one or give --join-token")
	}
	return nil
}

// checkSecretMode refuses a secrets file that group or others may read or
// write, as ssh refuses such a private key: the file is the cluster's keys.
func checkSecretMode(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if mode := fi.Mode().Perm(); mode&0o077 != 0 {
		return fmt.Errorf("%s is accessible by group or others (mode %04o); it holds the cluster's tokens: run chmod 600 %s", path, mode, path)
	}
	return nil
}

// scheme is the API's URL scheme, for the log line.
func (c *serveConfig) scheme() string {
	if c.apiTLS != nil {
		return "https"
	}
	return "http"
}
