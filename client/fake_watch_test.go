package client

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The fake's lock indexes and blocking reads (GET /v1/locks/{name} and
// GET /v1/locks with ?index=N&wait_ms=M), and POST /v1/locks/update.

// freeLocked frees lock name as a release or expiry would: a new index.
func (fc *fakeCluster) freeLocked(name string) {
	delete(fc.locks, name)
	fc.index++
	fc.freed[name] = fc.index
	fc.notifyLocked()
}

// lockJSONLocked is lock name as a read shows it, and its index.
func (fc *fakeCluster) lockJSONLocked(name string) (map[string]any, uint64) {
	if l, ok := fc.locks[name]; ok {
		return map[string]any{"name": name, "held": true, "owner": l.owner, "fencing_token": l.token,
			"ttl_ms": l.ttlMs, "value": l.value, "index": l.idx}, l.idx
	}
	idx := fc.freed[name]
	return map[string]any{"name": name, "held": false, "index": idx}, idx
}

// blockingRead answers with read() once its index passes ?index= or
// ?wait_ms= has passed (at once without ?index=).
func (fc *fakeCluster) blockingRead(w http.ResponseWriter, r *http.Request, read func() (map[string]any, uint64)) {
	q := r.URL.Query()
	var after uint64
	var wait time.Duration
	if s := q.Get("index"); s != "" {
		after, _ = strconv.ParseUint(s, 10, 64)
		ms, _ := strconv.ParseInt(q.Get("wait_ms"), 10, 64)
		if ms < 0 || ms > 300000 {
			writeErr(w, 400, "bad_request", "wait_ms: out of range")
			return
		}
		wait = time.Duration(ms) * time.Millisecond
	}
	until := time.Now().Add(wait)
	for {
		fc.mu.Lock()
		body, idx := read()
		changed := fc.changed
		fc.mu.Unlock()
		left := time.Until(until)
		if idx > after || left <= 0 || q.Get("index") == "" {
			w.Header().Set("X-Raftlock-Index", strconv.FormatUint(idx, 10))
			writeJSON(w, 200, body)
			return
		}
		t := time.NewTimer(left)
		select {
		case <-changed:
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		case <-fc.closing:
			t.Stop()
			return
		}
		t.Stop()
	}
}

func (fc *fakeCluster) getLock(w http.ResponseWriter, r *http.Request, name string) {
	fc.blockingRead(w, r, func() (map[string]any, uint64) { return fc.lockJSONLocked(name) })
}

func (fc *fakeCluster) listLocks(w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("prefix")
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	fc.blockingRead(w, r, func() (map[string]any, uint64) {
		var names []string
		var idx uint64
		for name, l := range fc.locks {
			if strings.HasPrefix(name, prefix) {
				names = append(names, name)
				idx = max(idx, l.idx)
			}
		}
		for name, i := range fc.freed {
			if strings.HasPrefix(name, prefix) {
				idx = max(idx, i)
			}
		}
		sort.Strings(names)
		truncated := false
		if limit > 0 && len(names) > limit {
			names, truncated = names[:limit], true
		}
		locks := []map[string]any{}
		for _, name := range names {
			l, _ := fc.lockJSONLocked(name)
			locks = append(locks, l)
		}
		return map[string]any{"locks": locks, "truncated": truncated, "index": idx}, idx
	})
}

func (fc *fakeCluster) update(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Name    string `json:"name"`
		LeaseID string `json:"lease_id"`
		Value   string `json:"value"`
	}
	if !decode(w, r, &q) {
		return
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	l, ok := fc.locks[q.Name]
	if !ok || l.leaseID != q.LeaseID {
		writeErr(w, http.StatusConflict, "not_holder", "lease does not hold the lock")
		return
	}
	fc.index++
	l.value, l.idx = q.Value, fc.index
	fc.notifyLocked()
	body, _ := fc.lockJSONLocked(q.Name)
	writeJSON(w, 200, body)
}

// setValue changes the value of lock name as its holder's update would.
func (fc *fakeCluster) setValue(name, value string) uint64 {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	l := fc.locks[name]
	fc.index++
	l.value, l.idx = value, fc.index
	fc.notifyLocked()
	return fc.index
}
