package api

import (
	"crypto/rand"
	"encoding/base64"
)

// Bounds of a lease id's length; its characters are [A-Za-z0-9_-].
const (
	MinLeaseID = 16
	MaxLeaseID = 128
)

// LeaseIDRule says in words what ValidLeaseID checks, for error messages.
const LeaseIDRule = "16 to 128 characters of [A-Za-z0-9_-]"

// ValidLeaseID reports whether id is a lease id the contract accepts:
// MinLeaseID to MaxLeaseID characters of [A-Za-z0-9_-].
func ValidLeaseID(id string) bool {
	if len(id) < MinLeaseID || len(id) > MaxLeaseID {
		return false
	}
	for _, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// NewLeaseID returns a random lease id: 128 bits in URL-safe base64 without
// padding, 22 characters of [A-Za-z0-9_-].
func NewLeaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (it crashes the program instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}
