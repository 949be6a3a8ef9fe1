package api

import "encoding/json"

// BatchRequest is the body of POST /v1/batch: up to MaxBatchCalls calls.
type BatchRequest struct {
	Calls []BatchCall `json:"calls"`
}

// BatchCall is one call of a batch: the path of a batchable route and the
// body that route's request would carry.
type BatchCall struct {
	Path string          `json:"path"`
	Body json.RawMessage `json:"body"`
}

// BatchAnswer is the 200 answer to POST /v1/batch: a result per call, in
// the order of the calls.
type BatchAnswer struct {
	Results []BatchResult `json:"results"`
}

// BatchResult is one call's answer: its status, the headers its own answer
// would have carried besides the batch's (Retry-After), and its body.
type BatchResult struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body"`
}
