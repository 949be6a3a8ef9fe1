package nodeapi

import (
	"context"
	"fmt"
	"net"
	"strconv"
)

// Progress is what a member reports of itself (GET /v1/cluster on its API);
// the leader promotes a non-voter from it.
type Progress struct {
	ID        string // the member's own id
	Leader    string // the id of the leader it follows, "" if none
	Term      uint64 // its current term
	LastIndex uint64 // the last index in its log
	// CommandVersion is the highest command format the member decodes
	// (fsm.MaxCommandVersion of its build; 0 from a build that predates
	// the field). The leader writes a format only when every member has
	// reported it.
	CommandVersion uint8
}

// ProgressFetcher asks the member id, whose API listens at httpAddr, for its
// own Progress. It must return once ctx ends.
type ProgressFetcher func(ctx context.Context, id, httpAddr string) (Progress, error)

// MemberError is a join request with a malformed field.
type MemberError struct {
	Field string // id, raft_addr or http_addr
	Msg   string
}

func (e *MemberError) Error() string { return e.Field + ": " + e.Msg }

// maxIDLen bounds a node id; ids are in every configuration entry and log line.
const maxIDLen = 64

// ValidateID checks a node id: 1 to 64 characters of [A-Za-z0-9._-]. Every
// node id passes it, a bootstrapping node's as a joining one's: the node
// table also keeps entries no id can name (the cluster id's key).
func ValidateID(id string) error {
	if len(id) == 0 || len(id) > maxIDLen {
		return &MemberError{"id", fmt.Sprintf("must be 1 to %d characters of [A-Za-z0-9._-]", maxIDLen)}
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return &MemberError{"id", fmt.Sprintf("must be 1 to %d characters of [A-Za-z0-9._-]", maxIDLen)}
		}
	}
	return nil
}

// ValidateMember checks a joining node's id and addresses: an id of 1 to 64
// characters of [A-Za-z0-9._-], and host:port addresses another node can
// dial (no unspecified host, a port from 1 to 65535). httpAddr may be empty.
// Nothing is resolved here (a name may resolve later, or only on peers).
func ValidateMember(id, raftAddr, httpAddr string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	if err := validAddr(raftAddr); err != nil {
		return &MemberError{"raft_addr", err.Error()}
	}
	if httpAddr != "" {
		if err := validAddr(httpAddr); err != nil {
			return &MemberError{"http_addr", err.Error()}
		}
	}
	return nil
}

func validAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port must be 1 to 65535", addr)
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsUnspecified() || ip.IsMulticast() {
			return fmt.Errorf("%q: %s is not an address other nodes can dial", addr, host)
		}
		return nil
	}
	if len(host) > 253 {
		return fmt.Errorf("%q: host name too long", addr)
	}
	for _, c := range []byte(host) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return fmt.Errorf("%q: %q is neither an IP address nor a host name", addr, host)
		}
	}
	return nil
}
