//go:build raftlock_faults

package faultclock

import (
	"encoding/json"
	"net/http"

	"github.com/hashicorp/go-hclog"
)

// Path is where Handler is served on the debug listener.
const Path = "/debug/clock"

// Handler serves GET (the clock's state) and POST (apply a Fault, answer the
// state after it) for c. Every fault is logged, so a node's log shows when
// its clock was moved.
func Handler(c *Clock, log hclog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
		case http.MethodPost:
			var f Fault
			dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&f); err != nil {
				http.Error(w, "bad fault: "+err.Error(), http.StatusBadRequest)
				return
			}
			if err := c.Apply(f); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			log.Warn("clock fault applied", "rate", f.Rate, "jump_mono_ms", f.JumpMonoMs,
				"pause_mono_ms", f.PauseMonoMs, "jump_wall_ms", f.JumpWallMs)
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(c.State())
	})
}
