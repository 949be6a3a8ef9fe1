// Package faultclock is a node's clock under test control: it runs at a
// chosen rate, its wall clock jumps by any amount either way, and its
// monotonic clock jumps forward, instantly or as across a pause, on command
// (POST /debug/clock on the --debug-addr listener).
//
// Everything but this comment is compiled only with -tags raftlock_faults:
// a release build of raftlock contains no fault clock and no /debug/clock
// endpoint.
package faultclock
