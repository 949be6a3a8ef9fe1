// Package register is the storage the workload writes to under its locks:
// for each lock name a fenced register and an unfenced one, served over
// loopback HTTP from the checker process. A client reads a register (getting
// its version), holds the lock a while, then writes a new version based on
// the one it read. A write based on an older version than the current one
// overwrites writes its client never saw: a lost update, which the register
// records.
//
// The fenced register checks tokens with the guard raftlock ships,
// client/fence's in-memory guard, so the checker exercises the shipped rule:
// a token is accepted once per resource, and only if strictly higher than
// every one accepted before. It checks reads too, with a guard of their own:
// a read advances the read guard; a write must not be below the highest
// token read, and advances the write guard. So one grant reads once and
// writes once, a second write under one token is refused, and once a newer
// holder has read, an older holder's write is refused: fencing reads is what
// makes fencing prevent lost updates. Both checks run under one mutex, so
// they are one atomic step.
package register

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"

	"github.com/raftlock/raftlock/client/fence"
	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// Request is the body of /read and /write.
type Request struct {
	Fenced bool   `json:"fenced"`
	Name   string `json:"name"`
	Token  uint64 `json:"token"`
	Based  int64  `json:"based"`
	Op     string `json:"op"`
	Again  bool   `json:"again,omitempty"` // a second write under one token, expected refused
}

// Response answers an accepted access.
type Response struct {
	Version int64 `json:"version"`
}

type reg struct {
	version int64
	writers map[int64]string // version -> op id that wrote it
	lost    map[string]bool
}

// Server holds all registers and their log.
type Server struct {
	mu     sync.Mutex
	regs   map[[2]string]*reg
	reads  *fence.Memory // fenced reads, by lock name
	writes *fence.Memory // fenced writes, by lock name
	log    []history.Access
	ln     net.Listener
	srv    *http.Server
}

// New returns an empty register server; Start serves it.
func New() *Server {
	return &Server{regs: map[[2]string]*reg{}, reads: fence.NewMemory(), writes: fence.NewMemory()}
}

// admit applies the fence to one fenced access; s.mu is held.
func (s *Server) admit(write bool, q Request) bool {
	if !write {
		return s.reads.Advance(context.Background(), q.Name, q.Token) == nil
	}
	return q.Token >= s.reads.Current(q.Name) && s.writes.Advance(context.Background(), q.Name, q.Token) == nil
}

// Access applies one read or write and returns the log entry.
func (s *Server) Access(write bool, q Request) history.Access {
	s.mu.Lock()
	defer s.mu.Unlock()
	kind := "u"
	if q.Fenced {
		kind = "f"
	}
	r := s.regs[[2]string{kind, q.Name}]
	if r == nil {
		r = &reg{writers: map[int64]string{}, lost: map[string]bool{}}
		s.regs[[2]string{kind, q.Name}] = r
	}
	a := history.Access{Seq: len(s.log), Fenced: q.Fenced, Name: q.Name, Write: write, OpID: q.Op, Token: q.Token, Based: q.Based, Again: q.Again}
	if q.Fenced && !s.admit(write, q) {
		a.Version = r.version
		s.log = append(s.log, a)
		return a
	}
	a.Accepted = true
	if write {
		for v := q.Based + 1; v <= r.version; v++ {
			if w := r.writers[v]; w != "" && !r.lost[w] {
				r.lost[w] = true
				a.Lost = append(a.Lost, w)
			}
		}
		r.version++
		r.writers[r.version] = q.Op
	}
	a.Version = r.version
	s.log = append(s.log, a)
	return a
}

// Log returns a copy of the access log.
func (s *Server) Log() []history.Access {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]history.Access(nil), s.log...)
}

// Start serves on a fresh loopback port and returns its URL.
func (s *Server) Start() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	s.ln = ln
	mux := http.NewServeMux()
	for path, write := range map[string]bool{"/read": false, "/write": true} {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
			var q Request
			if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			a := s.Access(write, q)
			w.Header().Set("Content-Type", "application/json")
			if !a.Accepted {
				w.WriteHeader(http.StatusConflict)
			}
			json.NewEncoder(w).Encode(Response{Version: a.Version})
		})
	}
	s.srv = &http.Server{Handler: mux}
	go s.srv.Serve(ln)
	return "http://" + ln.Addr().String(), nil
}

// Close stops serving.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	return s.srv.Close()
}
