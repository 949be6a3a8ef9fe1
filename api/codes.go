package api

// Error codes: the "error" field of an error body (Error). The comment on
// each gives its HTTP status; docs/API.md ("Statuses and what they
// promise") says what each promises about the request being applied.
const (
	// CodeBadRequest: 400 malformed or out-of-range input, also 405 (wrong
	// method) and 408 (the body did not arrive in time). Nothing applied.
	CodeBadRequest = "bad_request"
	// CodeUnauthorized: 401, no bearer token or an unknown one.
	CodeUnauthorized = "unauthorized"
	// CodeForbidden: 403, the token's role does not allow the request.
	CodeForbidden = "forbidden"
	// CodeNotFound: 404, no such endpoint, or a leave of a non-member.
	CodeNotFound = "not_found"
	// CodeHeld: 409, another lease holds the lock (body HeldError).
	CodeHeld = "held"
	// CodeNotHolder: 409, the lease does not hold the lock.
	CodeNotHolder = "not_holder"
	// CodeNoSession: 404, the session is unknown or has ended (expired or
	// closed). Nothing applied.
	CodeNoSession = "no_session"
	// CodeFull: 409, every permit of the semaphore is held (body
	// FullError). Nothing applied.
	CodeFull = "full"
	// CodeLimitMismatch: 409, the semaphore is held with another limit
	// (body LimitMismatchError). Nothing applied.
	CodeLimitMismatch = "limit_mismatch"
	// CodeSessionFull: 409, the session holds MaxLeasesPerSession leases
	// already. Nothing applied.
	CodeSessionFull = "session_full"
	// CodeUnsafeChange: 409, a join or leave that would leave fewer healthy
	// voters than a quorum.
	CodeUnsafeChange = "unsafe_change"
	// CodeNoSuccessor: 409, a leadership transfer with no other voter to
	// take leadership (a single-node cluster). Nothing changed.
	CodeNoSuccessor = "no_successor"
	// CodeTooLarge: 413, a body over MaxBody bytes.
	CodeTooLarge = "too_large"
	// CodeUnsupportedMediaType: 415, a body not declared application/json.
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeOverloaded: 429 (queue full, too many requests in flight) or 503
	// (connection limit); with Retry-After. Nothing applied.
	CodeOverloaded = "overloaded"
	// CodeStorage: 500, the leader's disk refused the entry; with
	// Retry-After. Unknown whether applied: resend with the same lease id.
	CodeStorage = "storage_error"
	// CodeInternal: 500, anything else. Promises nothing.
	CodeInternal = "internal"
	// CodeNoLeader: 503, no leader known in time, or the node is not ready
	// or stopping; with Retry-After. Nothing applied, certainly.
	CodeNoLeader = "no_leader"
	// CodeNotSupportedYet: 503, the request needs a log command format not
	// every node reads yet (a force release before every node runs a build
	// with command_version 3; a session, shared lock or semaphore request
	// before 5); with Retry-After. Nothing applied,
	// certainly: upgrade every node.
	CodeNotSupportedYet = "not_supported_yet"
	// CodeDiverged: 503, this node's state differs from the leader's; it
	// serves nothing until an operator acts. Nothing applied.
	CodeDiverged = "state_diverged"
	// CodeUnknownOutcome: 504, the node cannot know whether the write was
	// applied, and it may still be; with Retry-After. Retry with the same
	// lease id.
	CodeUnknownOutcome = "unknown_outcome"
)

// Header names of the contract.
const (
	// HeaderNode: on every response, the id of the node that answered.
	HeaderNode = "X-Raftlock-Node"
	// HeaderLeader: on every response, the leader's id as the answering
	// node knows it; absent when it knows none.
	HeaderLeader = "X-Raftlock-Leader"
	// HeaderForwardedBy: node to node, set by a follower relaying a request
	// to the leader; a node that does not lead answers such a request 503
	// itself, so a request makes at most one hop.
	HeaderForwardedBy = "X-Raftlock-Forwarded-By"
	// HeaderIndex: on lock reads, the index of the lock (or, for a list,
	// the highest under the prefix): the next blocking read's ?index=.
	HeaderIndex = "X-Raftlock-Index"
	// HeaderRetryAfter: seconds to wait before retrying, on every 503, 504
	// and 429 (and 500 storage_error).
	HeaderRetryAfter = "Retry-After"
)

// Limits of the contract.
const (
	// MaxBody is the most bytes a request body may have (413 above).
	MaxBody = 64 << 10
	// MaxBatchCalls is the most calls one POST /v1/batch may carry.
	MaxBatchCalls = 256
	// MaxName is the most bytes of a lock name (and of a list prefix).
	MaxName = 512
	// MaxOwner is the most bytes of an owner.
	MaxOwner = 256
	// MaxValue is the most bytes of a lock's value.
	MaxValue = 4096
	// MinTTLMs and MaxTTLMs bound ttl_ms.
	MinTTLMs = 500
	MaxTTLMs = 3_600_000
	// MaxWaitMs bounds an acquire's wait_ms and a blocking read's.
	MaxWaitMs = 300_000
	// DefaultBlockWaitMs is a blocking read's wait_ms when it gives none.
	DefaultBlockWaitMs = 60_000
	// MaxLockDelayMs bounds an acquire's lock_delay_ms.
	MaxLockDelayMs = 60_000
	// DefaultListLimit and MaxListLimit: a list's default and largest limit.
	DefaultListLimit = 1000
	MaxListLimit     = 10000
	// MaxErrorHolders bounds the holders a 409 held (of a shared lock) or
	// full answer lists; its holders_total counts them all.
	MaxErrorHolders = 32
)
