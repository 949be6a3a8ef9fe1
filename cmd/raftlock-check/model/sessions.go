package model

import (
	"fmt"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// Sessions is property (h)'s direct half: an ended session stays ended. Once
// a client has seen its session end (a close acknowledged, or any call
// answered 404 no_session), no renew, close or acquire naming the session
// and sent afterwards may succeed, unless a create of that session id may
// have applied after the end was seen (a create re-creates an ended
// session; an unknown create may apply at any later time).
//
// The rest of (h) rides on the other properties: a session's leases and
// permits are valid only while the session is (Validity), so a lock or
// permit that outlives its session, granted to another client while the
// session must still hold, breaks (a), (i) or (j); HoldsKept checks a
// session's lease keeps its token; the closing check finds holds that no
// session accounts for.
func Sessions(ops []history.Op) []Violation {
	type end struct {
		at int64
		op string
	}
	ends := map[string][]end{}
	creates := map[string][]history.Op{}
	for _, o := range ops {
		if o.Session == "" {
			continue
		}
		switch {
		case o.Kind == history.SessCreate:
			creates[o.Session] = append(creates[o.Session], o)
		case o.Outcome == history.NoSession, o.Kind == history.SessClose && o.Outcome == history.OK:
			ends[o.Session] = append(ends[o.Session], end{o.Return, o.ID})
		}
	}
	var vs []Violation
	for _, o := range ops {
		if o.Session == "" || o.Outcome != history.OK || o.Kind == history.SessCreate {
			continue
		}
		for _, e := range ends[o.Session] {
			if e.at >= o.Call {
				continue
			}
			revived := false
			for _, c := range creates[o.Session] {
				if c.Outcome != history.Fail && c.Call < o.Call && (c.Outcome == history.Unknown || c.Return > e.at) {
					revived = true
				}
			}
			if !revived {
				vs = append(vs, Violation{"h", fmt.Sprintf("session %s was seen ended by %s at t=%.3fs, yet %s (c%d %s %q, sent t=%.3fs) succeeded",
					short(o.Session), e.op, secs(e.at), o.ID, o.Client, o.Kind, o.Name, secs(o.Call))})
				break
			}
		}
	}
	return vs
}
