package httpapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Joiner returns the function a node announces itself with
// (raftnode.Config.Announce): POST /v1/cluster/join on target, the leader's
// HTTP address or the --join URL, with this node's id and addresses. It
// speaks https with tlsCfg when set (also for a bare host:port target) and
// sends token, an admin one, when set. Each call is bounded by 5 s.
func Joiner(tlsCfg *tls.Config, token string) func(ctx context.Context, target, id, raftAddr, httpAddr string) error {
	t := http.DefaultTransport.(*http.Transport).Clone()
	scheme := "http://"
	if tlsCfg != nil {
		t.TLSClientConfig, scheme = tlsCfg.Clone(), "https://"
	}
	// A node announces until it is known, then never again: keep no pool.
	t.DisableKeepAlives = true
	hc := &http.Client{Transport: t, Timeout: 5 * time.Second}
	return func(ctx context.Context, target, id, raftAddr, httpAddr string) error {
		if !strings.Contains(target, "://") {
			target = scheme + target
		}
		body, _ := json.Marshal(map[string]string{"id": id, "raft_addr": raftAddr, "http_addr": httpAddr})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(target, "/")+"/v1/cluster/join", bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("join via %s: %w", target, err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("join via %s: %w", target, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("join via %s: status %d", target, resp.StatusCode)
		}
		return nil
	}
}
