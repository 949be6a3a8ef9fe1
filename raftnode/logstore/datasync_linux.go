package logstore

import "syscall"

const haveDataSync = true

func fdatasync(fd uintptr) error {
	for {
		err := syscall.Fdatasync(int(fd))
		if err != syscall.EINTR {
			return err
		}
	}
}
