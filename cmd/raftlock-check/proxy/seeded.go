//go:build raftlock_seeded_bugs

package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
)

// SeededBugs lists the bugs a test build can seed, by name.
var SeededBugs = []string{"grant-over-holder", "early-expiry", "phantom-release", "session-early-expiry", "semaphore-over-limit"}

// ServerBugs are seeded into the raftlock server itself, built with the same
// tag: the checker starts no relay and hands the name to the nodes in
// RAFTLOCK_SEEDED_BUG. waiter-timeout-release is a known bug: a parked
// acquire whose wait runs out while its grant is in flight gets the grant,
// which the server has just released. restore-lowers-index is the backup
// restore bug appendMu fixed: commands land between the index a restore
// raises every lock's index to and the install, so a lock written then
// reads a lower index after the restore (the checker sees it with
// --faults restore, property (k)). restore-unrecorded is the bug the
// unconfirmed-restore record prevents: a node holding a backup restore the cluster never committed
// keeps no record of it, so it serves it and applies the cluster's entries
// on top of it (the checker sees it with --faults restore-crash: (g), (d)).
// tick-only-when-due is the leader loop before the FSM clock was stamped at
// least every TickInterval: a failover restarts every running lease, (l).
// waiter-late serves a lock's parked acquires 4 s late, (m), and
// session-late makes sessions last 3 s past their TTL, (n).
var ServerBugs = []string{"waiter-timeout-release", "restore-lowers-index", "restore-unrecorded",
	"tick-only-when-due", "waiter-late", "session-late"}

// ServerSide reports whether the named bug lives in the server.
func ServerSide(name string) bool { return slices.Contains(ServerBugs, name) }

// Lookup returns the named bug.
func Lookup(name string) (Bug, error) {
	switch name {
	case "grant-over-holder":
		return &grantOverHolder{holders: map[string]string{}}, nil
	case "early-expiry":
		return earlyExpiry{}, nil
	case "phantom-release":
		return phantomRelease{}, nil
	case "session-early-expiry":
		return sessionEarlyExpiry{}, nil
	case "semaphore-over-limit":
		return semaphoreOverLimit{}, nil
	}
	return nil, fmt.Errorf("unknown seeded bug %q (have %v)", name, SeededBugs)
}

// grantOverHolder skips the lease check on acquire: when the lock is held,
// it frees it from under its holder (with the holder's lease id, which the
// proxy saw granted) and grants it to the asker.
type grantOverHolder struct {
	mu      sync.Mutex
	holders map[string]string // lock name -> lease id last granted
}

func (b *grantOverHolder) Handle(x Exchange, fwd func(Exchange) (Answer, error)) (Answer, error) {
	a, err := fwd(x)
	if err != nil || x.Path != "/v1/locks/acquire" {
		return a, err
	}
	var req struct {
		Name    string `json:"name"`
		LeaseID string `json:"lease_id"`
	}
	json.Unmarshal(x.Body, &req)
	b.mu.Lock()
	holder := b.holders[req.Name]
	b.mu.Unlock()
	if a.Status == http.StatusConflict && holder != "" {
		rel, _ := json.Marshal(map[string]string{"name": req.Name, "lease_id": holder})
		fwd(Exchange{Path: "/v1/locks/release", Body: rel})
		a, err = fwd(x)
	}
	if err == nil && a.Status == http.StatusOK {
		b.mu.Lock()
		b.holders[req.Name] = req.LeaseID
		b.mu.Unlock()
	}
	return a, err
}

// earlyExpiry makes every lease expire after a quarter of its TTL: the
// server is asked for ttl/4, the client believes it got ttl.
type earlyExpiry struct{}

func (earlyExpiry) Handle(x Exchange, fwd func(Exchange) (Answer, error)) (Answer, error) {
	if x.Path == "/v1/locks/acquire" || x.Path == "/v1/locks/renew" {
		var m map[string]any
		if json.Unmarshal(x.Body, &m) == nil {
			if ttl, ok := m["ttl_ms"].(float64); ok {
				m["ttl_ms"] = max(500, int64(ttl)/4)
			} else if x.Path == "/v1/locks/renew" {
				m["ttl_ms"] = 500
			}
			x.Body, _ = json.Marshal(m)
		}
		a, err := fwd(x)
		if err == nil && a.Status == http.StatusOK {
			// Hide the shortened TTL from the client, as a buggy server would.
			var body map[string]any
			if json.Unmarshal(a.Body, &body) == nil {
				delete(body, "ttl_ms")
				a.Body, _ = json.Marshal(body)
			}
		}
		return a, err
	}
	return fwd(x)
}

// phantomRelease acknowledges every other release without applying it.
type phantomRelease struct{}

var phantomCount struct {
	sync.Mutex
	n int
}

func (phantomRelease) Handle(x Exchange, fwd func(Exchange) (Answer, error)) (Answer, error) {
	if x.Path == "/v1/locks/release" {
		phantomCount.Lock()
		phantomCount.n++
		skip := phantomCount.n%2 == 0
		phantomCount.Unlock()
		if skip {
			body := []byte(`{"released":true}` + "\n")
			return Answer{http.StatusOK, http.Header{"Content-Type": {"application/json"}}, body}, nil
		}
	}
	return fwd(x)
}

// sessionEarlyExpiry makes every session expire after a quarter of its TTL
// (the server is asked for ttl/4, the client believes it got ttl), and with
// it every lock and permit held in it: others get them while the session
// must still hold.
type sessionEarlyExpiry struct{}

func (sessionEarlyExpiry) Handle(x Exchange, fwd func(Exchange) (Answer, error)) (Answer, error) {
	if x.Path == "/v1/sessions" || x.Path == "/v1/sessions/renew" {
		var m map[string]any
		if json.Unmarshal(x.Body, &m) == nil {
			if ttl, ok := m["ttl_ms"].(float64); ok {
				m["ttl_ms"] = max(500, int64(ttl)/4)
				x.Body, _ = json.Marshal(m)
			}
		}
	}
	return fwd(x)
}

// semaphoreOverLimit grants one permit too many: it asks the server for
// limit+1 and answers with the limit the client asked, so up to limit+1
// permits are valid at once, each believing the limit holds.
type semaphoreOverLimit struct{}

func (semaphoreOverLimit) Handle(x Exchange, fwd func(Exchange) (Answer, error)) (Answer, error) {
	if x.Path != "/v1/semaphores/acquire" && x.Path != "/v1/semaphores/renew" {
		return fwd(x)
	}
	var m map[string]any
	if json.Unmarshal(x.Body, &m) == nil {
		if limit, ok := m["limit"].(float64); ok {
			m["limit"] = int64(limit) + 1
			x.Body, _ = json.Marshal(m)
		}
	}
	a, err := fwd(x)
	if err == nil && (a.Status == http.StatusOK || a.Status == http.StatusConflict) {
		var body map[string]any
		if json.Unmarshal(a.Body, &body) == nil {
			if limit, ok := body["limit"].(float64); ok {
				body["limit"] = int64(limit) - 1
				a.Body, _ = json.Marshal(body)
			}
		}
	}
	return a, err
}
