//go:build !raftlock_seeded_bugs

package raftnode

// seededWaiterTimeoutRelease is false in every ordinary build: the seeded
// bug's code is compiled out (see seeded_on.go).
const seededWaiterTimeoutRelease = false
