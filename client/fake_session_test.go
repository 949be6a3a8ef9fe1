package client

import (
	"net/http"
	"sort"
	"strings"
	"time"
)

// The fake cluster's sessions and semaphores, as docs/API.md specifies them:
// enough state for the client's mappings and watchdogs; nothing expires by
// itself (tests end sessions with endSession).

type fakeSession struct {
	id, owner          string
	ttlMs, lockDelayMs int64
}

type fakeSem struct {
	limit   int
	holders map[int]*fakePermit // slot -> holder
	tokens  map[int]uint64      // slot -> last token granted
}

type fakePermit struct {
	owner, leaseID, session string
	slot                    int
	token                   uint64
	ttlMs                   int64
}

// liveSession reports whether session id exists. fc.mu not held.
func (fc *fakeCluster) liveSession(id string) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.sessions[id] != nil
}

// endSession ends session id as its expiry would: its locks and permits go.
func (fc *fakeCluster) endSession(id string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.endSessionLocked(id)
}

func (fc *fakeCluster) endSessionLocked(id string) int {
	delete(fc.sessions, id)
	n := 0
	for name, l := range fc.locks {
		if l.session == id {
			fc.freeLocked(name)
			n++
		}
	}
	for _, s := range fc.sems {
		for slot, p := range s.holders {
			if p.session == id {
				delete(s.holders, slot)
				n++
			}
		}
	}
	fc.index++
	fc.notifyLocked()
	return n
}

// holdPermit makes another client hold a permit of semaphore name.
func (fc *fakeCluster) holdPermit(name string, limit int, owner, leaseID string) (int, uint64) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	p, _ := fc.grantPermitLocked(name, limit, owner, leaseID, "", 10000)
	return p.slot, p.token
}

// dropPermit removes the permit held by leaseID, as an expiry would.
func (fc *fakeCluster) dropPermit(name, leaseID string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	s := fc.sems[name]
	for slot, p := range s.holders {
		if p.leaseID == leaseID {
			delete(s.holders, slot)
		}
	}
	fc.index++
	fc.notifyLocked()
}

// grantPermitLocked grants a permit if one is free (or leaseID holds one).
func (fc *fakeCluster) grantPermitLocked(name string, limit int, owner, leaseID, session string, ttlMs int64) (*fakePermit, bool) {
	s := fc.sems[name]
	if s == nil || len(s.holders) == 0 {
		if s == nil {
			s = &fakeSem{holders: map[int]*fakePermit{}, tokens: map[int]uint64{}}
			fc.sems[name] = s
		}
		s.limit = limit
	}
	for _, p := range s.holders {
		if p.leaseID == leaseID {
			return p, true
		}
	}
	for slot := 0; slot < s.limit; slot++ {
		if s.holders[slot] == nil {
			fc.index++
			p := &fakePermit{owner: owner, leaseID: leaseID, session: session, slot: slot, token: fc.index, ttlMs: ttlMs}
			s.holders[slot], s.tokens[slot] = p, fc.index
			fc.notifyLocked()
			return p, true
		}
	}
	return nil, false
}

func (fc *fakeCluster) permitJSON(name string, limit int, p *fakePermit) map[string]any {
	m := map[string]any{"name": name, "owner": p.owner, "lease_id": p.leaseID, "slot": p.slot, "fencing_token": p.token, "limit": limit, "ttl_ms": p.ttlMs}
	if s := fc.sessions[p.session]; s != nil {
		m["session_id"], m["ttl_ms"] = s.id, s.ttlMs
	}
	return m
}

func (fc *fakeCluster) sessionJSON(s *fakeSession) map[string]any {
	return map[string]any{"session_id": s.id, "owner": s.owner, "ttl_ms": s.ttlMs, "lock_delay_ms": s.lockDelayMs}
}

// serveSessions serves /v1/sessions and /v1/semaphores; false: not one of
// theirs.
func (fc *fakeCluster) serveSessions(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && p == "/v1/sessions":
		var q struct {
			Owner       string `json:"owner"`
			TTLMs       int64  `json:"ttl_ms"`
			LockDelayMs int64  `json:"lock_delay_ms"`
			SessionID   string `json:"session_id"`
		}
		if !decode(w, r, &q) {
			return true
		}
		if q.TTLMs < 500 || q.TTLMs > 3600000 {
			writeErr(w, 400, "bad_request", "ttl_ms: out of range")
			return true
		}
		fc.mu.Lock()
		defer fc.mu.Unlock()
		if q.SessionID == "" {
			q.SessionID = NewLeaseID()
		}
		s := fc.sessions[q.SessionID]
		if s == nil {
			s = &fakeSession{id: q.SessionID, owner: q.Owner, ttlMs: q.TTLMs, lockDelayMs: q.LockDelayMs}
			fc.sessions[s.id] = s
			fc.index++
		}
		writeJSON(w, 200, fc.sessionJSON(s))
	case r.Method == http.MethodPost && (p == "/v1/sessions/renew" || p == "/v1/sessions/close"):
		var q struct {
			SessionID string `json:"session_id"`
			TTLMs     int64  `json:"ttl_ms"`
		}
		if !decode(w, r, &q) {
			return true
		}
		fc.mu.Lock()
		defer fc.mu.Unlock()
		s := fc.sessions[q.SessionID]
		if s == nil {
			writeErr(w, 404, "no_session", "no such session")
			return true
		}
		if p == "/v1/sessions/close" {
			writeJSON(w, 200, map[string]any{"closed": true, "released": fc.endSessionLocked(s.id)})
			return true
		}
		if q.TTLMs != 0 {
			s.ttlMs = q.TTLMs
		}
		writeJSON(w, 200, fc.sessionJSON(s))
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/v1/sessions/"):
		fc.mu.Lock()
		defer fc.mu.Unlock()
		s := fc.sessions[strings.TrimPrefix(p, "/v1/sessions/")]
		if s == nil {
			writeErr(w, 404, "no_session", "no such session")
			return true
		}
		m := fc.sessionJSON(s)
		delete(m, "session_id")
		var leases []map[string]any
		for name, l := range fc.locks {
			if l.session == s.id {
				leases = append(leases, map[string]any{"kind": "lock", "name": name, "fencing_token": l.token})
			}
		}
		for name, sem := range fc.sems {
			for _, h := range sem.holders {
				if h.session == s.id {
					leases = append(leases, map[string]any{"kind": "semaphore", "name": name, "fencing_token": h.token, "slot": h.slot})
				}
			}
		}
		sort.Slice(leases, func(i, j int) bool { return leases[i]["name"].(string) < leases[j]["name"].(string) })
		m["leases"], m["index"], m["remaining_ms"] = leases, fc.index, s.ttlMs
		writeJSON(w, 200, m)
	case r.Method == http.MethodPost && p == "/v1/semaphores/acquire":
		fc.semAcquire(w, r)
	case r.Method == http.MethodPost && (p == "/v1/semaphores/renew" || p == "/v1/semaphores/release"):
		var q struct {
			Name    string `json:"name"`
			LeaseID string `json:"lease_id"`
			TTLMs   int64  `json:"ttl_ms"`
		}
		if !decode(w, r, &q) {
			return true
		}
		fc.mu.Lock()
		defer fc.mu.Unlock()
		s := fc.sems[q.Name]
		var held *fakePermit
		if s != nil {
			for _, h := range s.holders {
				if h.leaseID == q.LeaseID {
					held = h
				}
			}
		}
		if held == nil {
			writeErr(w, http.StatusConflict, "not_holder", "lease does not hold a permit")
			return true
		}
		if p == "/v1/semaphores/release" {
			delete(s.holders, held.slot)
			fc.index++
			fc.notifyLocked()
			writeJSON(w, 200, map[string]any{"released": true})
			return true
		}
		writeJSON(w, 200, fc.permitJSON(q.Name, s.limit, held))
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/v1/semaphores/"):
		fc.mu.Lock()
		defer fc.mu.Unlock()
		name := strings.TrimPrefix(p, "/v1/semaphores/")
		s := fc.sems[name]
		out := map[string]any{"name": name, "limit": 0, "holders": []any{}, "index": fc.index}
		if s != nil && len(s.holders) > 0 {
			out["limit"], out["holders"] = s.limit, fc.semHoldersLocked(s)
		}
		writeJSON(w, 200, out)
	default:
		return false
	}
	return true
}

func (fc *fakeCluster) semHoldersLocked(s *fakeSem) []map[string]any {
	hs := []map[string]any{}
	for slot := 0; slot < s.limit; slot++ {
		if h := s.holders[slot]; h != nil {
			hs = append(hs, map[string]any{"owner": h.owner, "slot": h.slot, "fencing_token": h.token, "ttl_ms": h.ttlMs})
		}
	}
	return hs
}

func (fc *fakeCluster) semAcquire(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Name      string `json:"name"`
		Limit     int    `json:"limit"`
		Owner     string `json:"owner"`
		TTLMs     int64  `json:"ttl_ms"`
		SessionID string `json:"session_id"`
		LeaseID   string `json:"lease_id"`
		WaitMs    int64  `json:"wait_ms"`
	}
	if !decode(w, r, &q) {
		return
	}
	switch {
	case q.Limit < 1 || q.Limit > 1024:
		writeErr(w, 400, "bad_request", "limit: out of range")
		return
	case (q.SessionID == "") == (q.TTLMs == 0):
		writeErr(w, 400, "bad_request", "exactly one of ttl_ms and session_id")
		return
	case q.SessionID != "" && !fc.liveSession(q.SessionID):
		writeErr(w, 404, "no_session", "no such session")
		return
	}
	if q.LeaseID == "" {
		q.LeaseID = NewLeaseID()
	}
	waitUntil := time.Now().Add(time.Duration(q.WaitMs) * time.Millisecond)
	for {
		fc.mu.Lock()
		if s := fc.sems[q.Name]; s != nil && len(s.holders) > 0 && s.limit != q.Limit {
			fc.mu.Unlock()
			writeJSON(w, http.StatusConflict, map[string]any{"error": "limit_mismatch", "message": "other limit", "limit": s.limit})
			return
		}
		p, ok := fc.grantPermitLocked(q.Name, q.Limit, q.Owner, q.LeaseID, q.SessionID, q.TTLMs)
		if ok {
			body := fc.permitJSON(q.Name, q.Limit, p)
			fc.mu.Unlock()
			writeJSON(w, 200, body)
			return
		}
		holders := fc.semHoldersLocked(fc.sems[q.Name])
		changed := fc.changed
		fc.mu.Unlock()
		wait := time.Until(waitUntil)
		if wait <= 0 {
			writeJSON(w, http.StatusConflict, map[string]any{"error": "full", "message": "semaphore full", "holders": holders})
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		case <-r.Context().Done():
		case <-fc.closing:
		}
		t.Stop()
		if r.Context().Err() != nil {
			return
		}
		select {
		case <-fc.closing:
			return
		default:
		}
	}
}
