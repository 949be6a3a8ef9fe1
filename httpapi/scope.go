package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// A token may carry name prefixes (the tokens file's prefix=P fields): it
// may then read and write only locks and semaphores whose names start with
// one of them, and sessions whose every lease does. A token without
// prefixes, and every admin token, may use every name. This is etcd's
// key-prefix permission and Consul's key_prefix rule, with the token's role
// as the access level: a read-only token with prefixes reads only under
// them, a read-write one writes only under them.

// scope is the prefixes the request's token may use; nil: every name.
type scopeKey struct{}

func withScope(r *http.Request, prefixes []string) *http.Request {
	if len(prefixes) == 0 {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), scopeKey{}, prefixes))
}

func scopeOf(ctx context.Context) []string {
	p, _ := ctx.Value(scopeKey{}).([]string)
	return p
}

// inScope reports whether name starts with one of prefixes (nil: every
// name does).
func inScope(prefixes []string, name string) bool {
	if prefixes == nil {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// forbidden is the 403 to a token that may not use what (a quoted name, a
// list's prefix, a session), naming the prefixes it may use.
func forbidden(ctx context.Context, what string) error {
	ps := scopeOf(ctx)
	quoted := make([]string, len(ps))
	for i, p := range ps {
		quoted[i] = fmt.Sprintf("%q", p)
	}
	who := callerName(ctx)
	return &apiError{http.StatusForbidden, api.CodeForbidden,
		fmt.Sprintf("token %q may use only names under %s; %s is outside them", who, strings.Join(quoted, ", "), what)}
}

// mayName answers 403 unless the request's token may use name.
func mayName(ctx context.Context, name string) error {
	if inScope(scopeOf(ctx), name) {
		return nil
	}
	return forbidden(ctx, fmt.Sprintf("%q", name))
}

// named is a request body that names one lock or semaphore: writeHandler
// checks the name against the token's prefixes before anything else.
type named interface{ lockName() string }

func (r *acquireRequest) lockName() string    { return r.Name }
func (r *renewRequest) lockName() string      { return r.Name }
func (r *updateRequest) lockName() string     { return r.Name }
func (r *releaseRequest) lockName() string    { return r.Name }
func (r *semAcquireRequest) lockName() string { return r.Name }
func (r *semRenewRequest) lockName() string   { return r.Name }
func (r *semReleaseRequest) lockName() string { return r.Name }

// listScope is what a list (or a blocking list) under prefix shows to the
// request's token: the prefixes to list, sorted, none under another.
//   - A prefix within one of the token's: that prefix, as without scopes.
//   - A prefix wider than some of the token's ("" lists every lock): the
//     token's prefixes under it. The list shows only names the token may
//     read, and its index is theirs, so nothing of another tenant's names,
//     not even when they change, shows (Consul filters a KV list by its ACL
//     the same way, where etcd would refuse the range).
//   - A prefix disjoint from all of them: 403. Such a list could only ever
//     be empty, which would hide the mistake (a wrong token, a typo).
func listScope(ctx context.Context, prefix string) ([]string, error) {
	ps := scopeOf(ctx)
	if inScope(ps, prefix) {
		return []string{prefix}, nil
	}
	var under []string
	for _, p := range ps {
		if strings.HasPrefix(p, prefix) {
			under = append(under, p)
		}
	}
	if len(under) == 0 {
		return nil, forbidden(ctx, fmt.Sprintf("prefix %q", prefix))
	}
	return under, nil
}

// minimalPrefixes sorts ps and drops every prefix that another one covers
// (and duplicates): what is left lists disjoint ranges of names, in order.
func minimalPrefixes(ps []string) []string {
	ps = slices.Clone(ps)
	slices.Sort(ps)
	out := ps[:0]
	for _, p := range ps {
		if len(out) > 0 && strings.HasPrefix(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// listUnder lists up to limit held locks under every one of prefixes
// (disjoint, sorted: see minimalPrefixes), in name order, with the highest
// index among them. With several prefixes each is read apart, so the
// index may be newer than some part of the list: a blocking reader then
// only looks once more. Each is listed up to limit, so a few prefixes cost
// a few times one list.
func listUnder(m nodeapi.LockReader, prefixes []string, limit int) ([]fsm.Lock, bool, uint64) {
	if len(prefixes) == 1 {
		return m.ListIndexed(prefixes[0], limit)
	}
	var all []fsm.Lock
	var truncated bool
	var idx uint64
	for _, p := range prefixes {
		locks, tr, i := m.ListIndexed(p, limit)
		idx = max(idx, i)
		all = append(all, locks...)
		truncated = truncated || tr
	}
	if len(all) > limit {
		all, truncated = all[:limit], true
	}
	return all, truncated, idx
}

// maySession answers 403 unless the request's token may use every lease
// the session holds now, read from this node's state (on the leader, where
// writes are decided, its own). A session has no name of its own: it
// belongs to whoever may touch what it holds, so a token renews, closes or
// reads another tenant's session only if it may use every name in it (and
// knows its id, a secret as a lease id is). An unknown session passes: the
// command itself answers no_session.
func (s *Server) maySession(ctx context.Context, id string) error {
	ps := scopeOf(ctx)
	if ps == nil {
		return nil
	}
	m, err := s.store.Read(ctx, true)
	if err != nil {
		return nil // the command's own read or write answers it
	}
	ss, ok := m.Session(id)
	if !ok {
		return nil
	}
	return sessionInScope(ctx, ss)
}

func sessionInScope(ctx context.Context, ss fsm.Session) error {
	ps := scopeOf(ctx)
	for _, l := range ss.Leases {
		if !inScope(ps, l.Name) {
			return forbidden(ctx, fmt.Sprintf("the session's lease on %q", l.Name))
		}
	}
	return nil
}
