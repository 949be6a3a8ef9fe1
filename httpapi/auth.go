package httpapi

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/raftlock/raftlock/api"
)

// Role is what a bearer token may do. Each role includes the ones below it.
type Role int

// Roles, weakest first. RoleNone marks the endpoints anyone may call.
const (
	RoleNone Role = iota
	RoleReadOnly
	RoleReadWrite
	RoleAdmin
)

var roleNames = map[string]Role{"read-only": RoleReadOnly, "read-write": RoleReadWrite, "admin": RoleAdmin}

func (r Role) String() string {
	for name, role := range roleNames {
		if role == r {
			return name
		}
	}
	return "none"
}

// routeRoles is the role each route needs, by method and path template.
// Probes stay open so that orchestrators need no secret; /metrics needs a
// read-only token, since it tells how busy the service is. A route missing
// here needs admin: a new endpoint is closed until someone decides.
var routeRoles = map[string]Role{
	"GET /healthz":                         RoleNone,
	"GET /readyz":                          RoleNone,
	"GET /metrics":                         RoleReadOnly,
	"GET /ui/":                             RoleNone, // the status page holds no data; its script sends the user's token
	"GET /v1/locks":                        RoleReadOnly,
	"GET /v1/locks/{name:.+}":              RoleReadOnly,
	"GET /v1/sessions/{id}":                RoleReadOnly,
	"GET /v1/semaphores/{name:.+}":         RoleReadOnly,
	"GET /v1/cluster":                      RoleReadOnly,
	"GET /v1/cluster/members":              RoleReadOnly,
	"POST /v1/locks/acquire":               RoleReadWrite,
	"POST /v1/locks/renew":                 RoleReadWrite,
	"POST /v1/locks/release":               RoleReadWrite,
	"POST /v1/locks/update":                RoleReadWrite,
	"POST /v1/batch":                       RoleReadWrite, // and each call its own route's role
	"POST /v1/sessions":                    RoleReadWrite,
	"POST /v1/sessions/renew":              RoleReadWrite,
	"POST /v1/sessions/close":              RoleReadWrite,
	"POST /v1/semaphores/acquire":          RoleReadWrite,
	"POST /v1/semaphores/renew":            RoleReadWrite,
	"POST /v1/semaphores/release":          RoleReadWrite,
	"POST /v1/cluster/join":                RoleAdmin,
	"POST /v1/cluster/leave":               RoleAdmin,
	"POST /v1/cluster/transfer-leadership": RoleAdmin,
	"POST /v1/cluster/check-state":         RoleAdmin,
	"GET /v1/snapshot":                     RoleAdmin, // every lease id
	"POST /v1/snapshot":                    RoleAdmin,
}

// Tokens is a set of bearer tokens and their roles. Only SHA-256 hashes of
// the tokens are kept, and a presented token is compared with every one in
// constant time, so neither memory nor timing gives a token away.
type Tokens struct {
	entries []tokenEntry
	admin   string // first admin token given in plain text; see AdminToken
}

type tokenEntry struct {
	hash [sha256.Size]byte
	role Role
	name string // the tenant admission counts its writes against
	// prefixes are the names the token may use (scope.go); nil: all.
	prefixes []string
}

// minTokenLen keeps guessable tokens out of the file.
const minTokenLen = 16

// LoadTokens reads a token file; see ParseTokens.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("auth tokens %s: %w", path, err)
	}
	return t, nil
}

// ParseTokens reads lines "TOKEN ROLE [NAME] [prefix=P ...]", ROLE one of
// read-only, read-write or admin; NAME is the tenant admission control
// counts the token's writes against (default: "sha256:" and the first 8 hex
// digits of the token's hash). Each prefix=P limits the token to lock and
// semaphore names starting with P (any of them; scope.go); without one the
// token may use every name, as before prefixes existed. An admin token
// takes none: it keeps every name. TOKEN is at least 16 characters, or
// "sha256:" and the hex SHA-256 of the token, so the file need not hold the
// secret itself. A # starts a comment line, or a comment after the role;
// blank lines are skipped. Errors name the line, never the token.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	seen := map[[sha256.Size]byte]bool{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		for i, f := range fields {
			if i >= 2 && strings.HasPrefix(f, "#") {
				fields = fields[:i] // a comment after the role or name
				break
			}
		}
		if len(fields) < 2 {
			return nil, fmt.Errorf("line %d: want \"TOKEN ROLE [NAME] [prefix=P ...]\"", line)
		}
		role, ok := roleNames[fields[1]]
		if !ok {
			return nil, fmt.Errorf("line %d: role %q is not read-only, read-write or admin", line, fields[1])
		}
		var e tokenEntry
		e.role = role
		if hexHash, ok := strings.CutPrefix(fields[0], "sha256:"); ok {
			b, err := hex.DecodeString(hexHash)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("line %d: sha256: needs 64 hex digits", line)
			}
			copy(e.hash[:], b)
		} else {
			if len(fields[0]) < minTokenLen {
				return nil, fmt.Errorf("line %d: token shorter than %d characters", line, minTokenLen)
			}
			e.hash = sha256.Sum256([]byte(fields[0]))
			if role == RoleAdmin && t.admin == "" {
				t.admin = fields[0]
			}
		}
		e.name = "sha256:" + hex.EncodeToString(e.hash[:4])
		named := false
		for _, f := range fields[2:] {
			p, isPrefix := strings.CutPrefix(f, "prefix=")
			switch {
			case isPrefix && p == "":
				return nil, fmt.Errorf("line %d: prefix= needs a prefix (a token without prefix= may use every name)", line)
			case isPrefix && validName(p) != nil:
				return nil, fmt.Errorf("line %d: prefix %q: %v", line, p, validName(p))
			case isPrefix:
				e.prefixes = append(e.prefixes, p)
			case named:
				return nil, fmt.Errorf("line %d: want \"TOKEN ROLE [NAME] [prefix=P ...]\" (a second name %q)", line, f)
			default:
				e.name, named = f, true
			}
		}
		if role == RoleAdmin && len(e.prefixes) > 0 {
			return nil, fmt.Errorf("line %d: an admin token may use every name; prefix= would not limit it (give the prefixes to a read-write token)", line)
		}
		if e.prefixes != nil {
			e.prefixes = minimalPrefixes(e.prefixes)
		}
		if seen[e.hash] {
			return nil, fmt.Errorf("line %d: token listed twice", line)
		}
		seen[e.hash] = true
		t.entries = append(t.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("no tokens")
	}
	return t, nil
}

// AdminToken returns the first admin token the file gave in plain text, ""
// if none: what a node sends for its own join and announce when no
// --join-token is given.
func (t *Tokens) AdminToken() string { return t.admin }

// lookup returns the entry of token, with RoleNone when it is unknown. It
// looks at every entry, matched or not, so its timing does not depend on
// which entry (if any) matches.
func (t *Tokens) lookup(token string) tokenEntry {
	h := sha256.Sum256([]byte(token))
	var found tokenEntry
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(h[:], e.hash[:]) == 1 {
			found = e
		}
	}
	return found
}

// routeRole is the role the route of method and template tmpl needs.
func routeRole(method, tmpl string) Role {
	if role, ok := routeRoles[method+" "+tmpl]; ok {
		return role
	}
	return RoleAdmin
}

// authorize wraps the handler of a route that needs role need: it lets a
// request through when its bearer token's role covers it, and answers 401
// or 403 otherwise. Followers check before forwarding, and the leader
// checks the relayed Authorization header again. Tokens are never logged.
func (s *Server) authorize(need Role, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if need == RoleNone {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := bearer(r)
		if !ok {
			refuseBody(w, r) // answer now, not after the body a client without a token may be dripping
			w.Header().Set("WWW-Authenticate", `Bearer realm="raftlock"`)
			writeError(w, &apiError{http.StatusUnauthorized, api.CodeUnauthorized, "a bearer token is required (Authorization: Bearer TOKEN)"})
			return
		}
		e := s.opts.Tokens.lookup(token)
		have := e.role
		switch {
		case have == RoleNone:
			refuseBody(w, r)
			s.rateLog.Warn("unknown bearer token", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
			w.Header().Set("WWW-Authenticate", `Bearer realm="raftlock", error="invalid_token"`)
			writeError(w, &apiError{http.StatusUnauthorized, api.CodeUnauthorized, "unknown bearer token"})
		case have < need:
			refuseBody(w, r)
			s.rateLog.Warn("forbidden", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "role", have.String(), "needs", need.String())
			w.Header().Set("WWW-Authenticate", `Bearer realm="raftlock", error="insufficient_scope"`)
			writeError(w, &apiError{http.StatusForbidden, api.CodeForbidden, fmt.Sprintf("a %s token cannot %s %s; it needs %s", have, r.Method, r.URL.Path, need)})
		default:
			next.ServeHTTP(w, withScope(withCaller(withTenant(r, e.name), have), e.prefixes))
		}
	})
}

// bearer returns the token of an "Authorization: Bearer TOKEN" header.
func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

type roleKey struct{}

// withCaller records the role the request's token has, for rules a route
// cannot express: a handler that needs more for some bodies (a force
// release needs admin) asks callerMay.
func withCaller(r *http.Request, role Role) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), roleKey{}, role))
}

// callerMay reports whether the request's caller has role need. With
// tokens off every request may do everything, as for every admin route.
func (s *Server) callerMay(ctx context.Context, need Role) bool {
	if s.opts.Tokens == nil {
		return true
	}
	have, _ := ctx.Value(roleKey{}).(Role)
	return have >= need
}

// callerName is the name of the request's token (the tenant), or "" with
// tokens off: who to name in the log for an admin action.
func callerName(ctx context.Context) string {
	name, _ := ctx.Value(tenantKey{}).(string)
	return name
}
