// Package api is the wire contract of raftlock's HTTP API, written once: the
// request and response bodies, the error codes, the header names, the limits
// and the lease-id rule. docs/API.md is the contract in prose; this package
// is the same contract as Go types, and may only grow with it (fields,
// codes and endpoints are added, nothing that exists changes meaning).
//
// It holds types and pure rules only (standard library, no server code), so
// that the server (httpapi), the Go client (client) and the command line
// (cmd/raftlock) all import it and none of them imports the others. How the
// server decodes strictly (duplicate keys, lone surrogates, case-sensitive
// names) is the server's business, in httpapi.
//
// See https://github.com/raftlock/raftlock/blob/main/docs/API.md.
package api
