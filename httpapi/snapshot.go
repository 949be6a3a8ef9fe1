package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/store"
)

// Snapshotter is what a Store offers for backup and restore
// (raftnode.Node does); a store without it answers 501.
type Snapshotter interface {
	// SaveSnapshot writes a backup file of the cluster's state to w. Only
	// the leader can (store.ErrNotLeader elsewhere).
	SaveSnapshot(ctx context.Context, w io.Writer) error
	// RestoreSnapshot replaces the cluster's state with the backup file
	// read from r. An error with a BadInput() true method means the file
	// was refused and nothing changed.
	RestoreSnapshot(ctx context.Context, r io.Reader) error
}

const (
	snapshotPath = "/v1/snapshot"
	// MaxSnapshotBody bounds the body of POST /v1/snapshot, the only route
	// whose body may exceed api.MaxBody.
	MaxSnapshotBody = 1 << 30
	// snapshotTimeout bounds a save or restore, body upload included: a
	// large file through Raft takes longer than a lock operation.
	snapshotTimeout = 10 * time.Minute
	octetStream     = "application/octet-stream"
)

// streamsBody reports whether r's route reads its own body, so bodyFirst
// must leave it alone (its limit is api.MaxBody, far below a snapshot's).
func streamsBody(r *http.Request) bool {
	if route := mux.CurrentRoute(r); route != nil {
		if p, err := route.GetPathTemplate(); err == nil && p == snapshotPath {
			return true
		}
	}
	return false
}

func (s *Server) snapshotter(w http.ResponseWriter, r *http.Request) (Snapshotter, bool) {
	sn, ok := s.store.(Snapshotter)
	if !ok {
		refuseBody(w, r)
		writeError(w, &apiError{http.StatusNotImplemented, api.CodeInternal, "this node cannot take or restore snapshots"})
	}
	return sn, ok
}

// saveSnapshot serves GET /v1/snapshot: the leader's backup file. It is
// built whole before the answer starts, so a failure still gets a status.
func (s *Server) saveSnapshot(w http.ResponseWriter, r *http.Request) {
	sn, ok := s.snapshotter(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), snapshotTimeout)
	defer cancel()
	var buf bytes.Buffer
	if err := sn.SaveSnapshot(ctx, &buf); err != nil {
		s.log.Warn("snapshot save failed", "error", err)
		writeError(w, notLeaderHint(s, err))
		return
	}
	w.Header().Set("Content-Type", octetStream)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.Header().Set("Content-Disposition", `attachment; filename="raftlock.snap"`)
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
}

// restoreSnapshot serves POST /v1/snapshot: a binary body, not JSON.
func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != octetStream {
		refuseBody(w, r)
		writeError(w, &apiError{http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType,
			"the body of POST /v1/snapshot must be a backup file sent as " + octetStream})
		return
	}
	sn, ok := s.snapshotter(w, r)
	if !ok {
		return
	}
	if id, _ := s.store.Leader(); id != s.store.ID() {
		// Refused before up to 1 GiB is read for nothing.
		refuseBody(w, r)
		writeError(w, notLeaderHint(s, store.ErrNotLeader))
		return
	}
	// Past authorize: an admin's upload may be slow, within reason.
	setReadDeadline(r, time.Now().Add(snapshotTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxSnapshotBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, &apiError{http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("snapshot over %d bytes", MaxSnapshotBody)})
		return
	case err != nil:
		writeError(w, badRequest("reading snapshot: %v", err))
		return
	}
	setReadDeadline(r, time.Time{})
	ctx, cancel := context.WithTimeout(r.Context(), snapshotTimeout)
	defer cancel()
	if err := sn.RestoreSnapshot(ctx, bytes.NewReader(body)); err != nil {
		var bad interface{ BadInput() bool }
		if errors.As(err, &bad) && bad.BadInput() {
			writeError(w, badRequest("snapshot refused, nothing changed: %v", err))
			return
		}
		s.log.Warn("snapshot restore failed", "error", err)
		writeError(w, notLeaderHint(s, err))
		return
	}
	s.log.Warn("cluster state restored from an uploaded snapshot", "bytes", len(body), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"restored": true, "bytes": len(body)})
}

// notLeaderHint adds the leader's address to a not-leader error: snapshots
// are not forwarded (their bodies are large), the client goes there itself.
func notLeaderHint(s *Server, err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return err
	}
	for _, row := range errorTable {
		if errors.Is(err, row.err) && row.code == api.CodeNoLeader {
			msg := err.Error() + "; snapshots are served by the leader only"
			if id, addr := s.store.Leader(); id != "" {
				msg += fmt.Sprintf(" (%s at %s)", id, addr)
			}
			return &apiError{row.status, row.code, msg}
		}
	}
	return err
}
