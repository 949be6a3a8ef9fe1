package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/raftlock/raftlock/api"
)

// Request bodies are the contract's (package api); the validation of each
// is the server's, on a local type of the same shape.
type (
	acquireRequest  api.AcquireRequest
	renewRequest    api.RenewRequest
	updateRequest   api.UpdateRequest
	releaseRequest  api.ReleaseRequest
	joinRequest     api.JoinRequest
	leaveRequest    api.LeaveRequest
	transferRequest api.TransferRequest
	checkRequest    api.CheckStateRequest
)

func (r *acquireRequest) validate() error {
	if err := validName(r.Name); err != nil {
		return err
	}
	if err := validOwner(r.Owner); err != nil {
		return err
	}
	if err := validValue(r.Value); err != nil {
		return err
	}
	if err := ttlOrSession(r.TTLMs, r.SessionID); err != nil {
		return err
	}
	if r.LeaseID != "" {
		if err := validLeaseID(r.LeaseID); err != nil {
			return err
		}
	}
	if err := inRange("wait_ms", r.WaitMs, 0, api.MaxWaitMs); err != nil {
		return err
	}
	if err := inRange("lock_delay_ms", r.LockDelayMs, 0, api.MaxLockDelayMs); err != nil {
		return err
	}
	switch r.Mode {
	case "", api.ModeExclusive, api.ModeShared:
	default:
		return badRequest("mode: must be %q or %q", api.ModeExclusive, api.ModeShared)
	}
	switch {
	case r.LockDelayMs > 0 && r.Mode == api.ModeShared:
		return badRequest("lock_delay_ms: not with mode %q (a shared hold has no lock-delay)", api.ModeShared)
	case r.LockDelayMs > 0 && r.SessionID != "":
		return badRequest("lock_delay_ms: not with session_id (the session's own lock_delay_ms applies when it expires)")
	}
	return nil
}

// ttlOrSession checks that a lease asks for exactly one of a TTL of its
// own and a session, and that the one given is valid.
func ttlOrSession(ttl *int64, session string) error {
	switch {
	case ttl != nil && session != "":
		return badRequest("ttl_ms: not with session_id (give exactly one: a lease of a session lives as long as the session)")
	case session != "":
		return validID("session_id", session)
	case ttl == nil:
		return badRequest("ttl_ms: required (or session_id instead)")
	}
	return inRange("ttl_ms", *ttl, api.MinTTLMs, api.MaxTTLMs)
}

// validValue checks a lock's value: UTF-8, at most api.MaxValue bytes.
func validValue(v string) error { return asBadRequest(api.CheckValue(v)) }

func (r *updateRequest) validate() error {
	if err := validName(r.Name); err != nil {
		return err
	}
	if err := validLeaseID(r.LeaseID); err != nil {
		return err
	}
	return validValue(r.Value)
}

func (r *renewRequest) validate() error {
	if err := validName(r.Name); err != nil {
		return err
	}
	if err := validLeaseID(r.LeaseID); err != nil {
		return err
	}
	if r.TTLMs != nil {
		return inRange("ttl_ms", *r.TTLMs, api.MinTTLMs, api.MaxTTLMs)
	}
	return nil
}

func (r *releaseRequest) validate() error {
	if err := validName(r.Name); err != nil {
		return err
	}
	if r.Force {
		// Whoever holds it: a lease id would suggest only that lease.
		if r.LeaseID != "" {
			return badRequest("lease_id: must be empty with force (a force release ends whatever lease holds the lock)")
		}
		return nil
	}
	return validLeaseID(r.LeaseID)
}

func (r *joinRequest) validate() error {
	if r.ID == "" {
		return badRequest("id: required")
	}
	if r.RaftAddr == "" {
		return badRequest("raft_addr: required")
	}
	return nil
}

func (r *leaveRequest) validate() error {
	if r.ID == "" {
		return badRequest("id: required")
	}
	return nil
}

func (r *transferRequest) validate() error { return nil }

func (r *checkRequest) validate() error { return nil }

func validName(name string) error { return asBadRequest(api.CheckName(name)) }

func validLeaseID(id string) error { return validID("lease_id", id) }

// validID checks a secret id (a lease's or a session's) in field.
func validID(field, id string) error { return asBadRequest(api.CheckID(field, id)) }

// validOwner checks an owner: at most api.MaxOwner bytes of UTF-8.
func validOwner(owner string) error { return asBadRequest(api.CheckOwner(owner)) }

func inRange(field string, v, lo, hi int64) error {
	return asBadRequest(api.CheckRange(field, v, lo, hi))
}

// asBadRequest turns a rule of package api into a 400 (nil stays nil).
func asBadRequest(err error) error {
	if err == nil {
		return nil
	}
	return badRequest("%v", err)
}

// jsonContentType refuses a request body that is not declared JSON. Beyond
// strictness, this keeps browsers honest: a web page can make a browser POST
// text/plain or a form to any origin without asking (no CORS preflight), but
// not application/json. A charset parameter is allowed if it is UTF-8.
func jsonContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "application/json" {
		return nil // what every client sends: no need to parse it
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	if ct == "" {
		ct = "none"
	}
	return &apiError{http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType,
		fmt.Sprintf("Content-Type %s: a request body must be application/json (charset, if given, utf-8)", ct)}
}

// readBody reads at most api.MaxBody bytes; the raw bytes are kept so a follower
// can forward them to the leader unchanged. A body bodyFirst has already read
// is taken as it is, not copied again.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if rb, ok := r.Body.(*readAhead); ok && !rb.taken {
		rb.taken = true
		if len(rb.body) > api.MaxBody {
			return nil, &apiError{http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("request body over %d bytes", api.MaxBody)}
		}
		return rb.body, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, api.MaxBody))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, &apiError{http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("request body over %d bytes", api.MaxBody)}
	}
	if err != nil {
		return nil, badRequest("reading body: %v", err)
	}
	return body, nil
}

// validator is a request that checks its own fields.
type validator interface{ validate() error }

// decode parses a JSON object strictly: unknown fields, trailing data and
// wrong types are errors naming the field, so typos never pass silently.
func decode(body []byte, dst validator) error {
	// encoding/json would replace invalid UTF-8 with U+FFFD, so two different
	// invalid names would silently become one lock.
	if !utf8.Valid(body) {
		return badRequest("%s: must be valid UTF-8", invalidUTF8Field(body))
	}
	// Nearly every body is a flat object of known names: one scan proves it
	// has nothing checkFields would refuse, and json.Unmarshal then decodes
	// it without a Decoder's token-by-token cost (a third of a write's
	// parse). Anything else, an error included, takes the strict path below,
	// which alone words the errors.
	if plainObject(body, jsonNames(reflect.TypeOf(dst).Elem())) {
		if err := json.Unmarshal(body, dst); err == nil {
			return dst.validate()
		}
		reflect.ValueOf(dst).Elem().SetZero()
	}
	return decodeStrict(body, dst)
}

// decodeStrict is decode without the fast path, for a body known to be
// valid UTF-8.
func decodeStrict(body []byte, dst validator) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.Is(err, io.EOF):
			return badRequest("body: a JSON object is required")
		case errors.As(err, &typeErr) && typeErr.Field == "":
			return badRequest("body: must be a JSON object, not %s", typeErr.Value)
		case errors.As(err, &typeErr):
			return badRequest("%s: must be %s, not %s", typeErr.Field, jsonKind(typeErr.Type), typeErr.Value)
		case errors.As(err, &syntaxErr):
			return badRequest("body: malformed JSON at byte %d", syntaxErr.Offset)
		}
		return badRequest("body: %v", err) // includes `json: unknown field "x"`
	}
	// dec.More() would miss a stray '}' or ']'; only the end of input will do.
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("body: unexpected data after the JSON object")
	}
	if err := checkFields(body, dst); err != nil {
		return err
	}
	return dst.validate()
}

// jsonKind names what a Go type holds in JSON terms, for an error a client
// reads: "an integer", never "a int64".
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "a " + t.String()
}

// checkFields walks the top-level object that decode has already parsed and
// refuses what encoding/json lets through silently: a field name that
// matches only by ignoring case ("TTL_MS"), a field given twice (it keeps
// the last), and a string holding a lone UTF-16 surrogate escape such as
// "\ud800" (it becomes U+FFFD, so two different names would become one
// lock, as with invalid UTF-8).
func checkFields(body []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // '{'
		return badRequest("body: %v", err)
	}
	known := jsonNames(reflect.TypeOf(dst).Elem())
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return badRequest("body: %v", err)
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return badRequest("body: %v", err)
		}
		switch {
		case !known[name]:
			return badRequest("body: unknown field %q (field names are case-sensitive)", name)
		case seen[name]:
			return badRequest("%s: given more than once", name)
		case loneSurrogate(raw):
			return badRequest("%s: must be valid UTF-8 (a lone surrogate escape such as \\ud800 is not)", name)
		}
		seen[name] = true
	}
	return nil
}

// loneSurrogate reports whether the JSON text raw holds a \uXXXX escape of
// a UTF-16 surrogate that is not half of a high-low pair.
func loneSurrogate(raw []byte) bool {
	hex4 := func(i int) (rune, bool) { // the 4 hex digits of a \u escape at raw[i]
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		switch {
		case !ok:
			i++ // another escape: skip the escaped byte
		case utf16.IsSurrogate(r) && r < 0xdc00:
			lo, ok := hex4(i + 6)
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i += 11
		case utf16.IsSurrogate(r):
			return true // a low half without a high one before it
		default:
			i += 5
		}
	}
	return false
}

// plainObject reports whether body is one JSON object whose members are all
// named in known, each once, by a name without escapes, and whose values are
// strings without \u escapes, numbers, true, false or null: a body that
// checkFields would pass and that encoding/json decodes exactly as the
// strict path would. It does not check the values' syntax (json.Unmarshal
// does). Any doubt answers false.
func plainObject(body []byte, known map[string]bool) bool {
	var seen [16][]byte
	n := 0
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return skipSpace(body, i+1) == len(body)
	}
	for {
		if i == len(body) || body[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(body) && body[j] != '"' {
			if body[j] == '\\' {
				return false
			}
			j++
		}
		if j == len(body) {
			return false
		}
		name := body[i+1 : j]
		if !known[string(name)] || n == len(seen) {
			return false
		}
		for _, s := range seen[:n] {
			if bytes.Equal(s, name) {
				return false
			}
		}
		seen[n] = name
		n++
		i = skipSpace(body, j+1)
		if i == len(body) || body[i] != ':' {
			return false
		}
		i = skipSpace(body, i+1)
		if i == len(body) {
			return false
		}
		switch body[i] {
		case '{', '[':
			return false
		case '"':
			for i++; i < len(body) && body[i] != '"'; i++ {
				if body[i] == '\\' {
					if i+1 == len(body) || body[i+1] == 'u' {
						return false
					}
					i++
				}
			}
			if i == len(body) {
				return false
			}
			i++
		default:
			for i < len(body) && body[i] != ',' && body[i] != '}' && !isSpace(body[i]) {
				i++
			}
		}
		i = skipSpace(body, i)
		if i == len(body) {
			return false
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return skipSpace(body, i+1) == len(body)
		default:
			return false
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

var jsonNameCache sync.Map // reflect.Type -> map[string]bool

// jsonNames returns the JSON field names of struct type t.
func jsonNames(t reflect.Type) map[string]bool {
	if v, ok := jsonNameCache.Load(t); ok {
		return v.(map[string]bool)
	}
	names := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names[name] = true
	}
	jsonNameCache.Store(t, names)
	return names
}

// invalidUTF8Field names the first field (by name) whose value is not valid
// UTF-8, or "body" when it cannot tell.
func invalidUTF8Field(body []byte) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return "body"
	}
	names := make([]string, 0, len(fields))
	for k, v := range fields {
		if !utf8.Valid(v) {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return "body"
	}
	slices.Sort(names)
	return names[0]
}
