package api

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// The rules below are the ones the server applies to every request field of
// the same name, and a backup restore to every record of the file: a state
// the API could never have written is refused whole. Each error names the
// field and says the rule.

// CheckName checks a lock's or a semaphore's name: 1 to MaxName bytes of
// UTF-8 without control characters.
func CheckName(name string) error {
	if len(name) == 0 || len(name) > MaxName {
		return fmt.Errorf("name: must be 1 to %d bytes", MaxName)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("name: must be valid UTF-8")
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("name: must not contain control characters")
		}
	}
	return nil
}

// CheckOwner checks an owner: at most MaxOwner bytes of UTF-8.
func CheckOwner(owner string) error {
	if len(owner) > MaxOwner || !utf8.ValidString(owner) {
		return fmt.Errorf("owner: must be at most %d bytes of UTF-8", MaxOwner)
	}
	return nil
}

// CheckValue checks a lock's value: at most MaxValue bytes of UTF-8.
func CheckValue(v string) error {
	if len(v) > MaxValue || !utf8.ValidString(v) {
		return fmt.Errorf("value: must be at most %d bytes of UTF-8", MaxValue)
	}
	return nil
}

// CheckID checks a secret id (a lease's or a session's) in field.
func CheckID(field, id string) error {
	if !ValidLeaseID(id) {
		return fmt.Errorf("%s: must be %s", field, LeaseIDRule)
	}
	return nil
}

// CheckRange checks that v of field is within lo..hi.
func CheckRange(field string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s: must be between %d and %d", field, lo, hi)
	}
	return nil
}
