//go:build !linux

package logstore

import "errors"

const haveDataSync = false

func fdatasync(uintptr) error { return errors.New("fdatasync: not on this system") }
