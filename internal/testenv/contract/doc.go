// Package contract checks docs/openapi.yaml, the machine-readable form of
// the API contract, against the answers of real raftlock nodes, so that the
// spec and the server cannot drift apart; and that every time promise in
// docs/API.md names tests that exist. It holds tests only.
package contract
