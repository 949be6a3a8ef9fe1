package main

import "testing"

// get and list show a lock held shared: its mode and every holder, in text
// and in the API's shape with --json. Exclusive holds print as before.
func TestCLIGetListShared(t *testing.T) {
	_, base := startStub(t, map[string]stubAnswer{
		"GET /v1/locks/schema": {200, `{"name":"schema","held":true,"mode":"shared","owner":"r1","fencing_token":5,"ttl_ms":30000,"index":7,` + sharedHolders + `}`},
		"GET /v1/locks/orders": {200, `{"name":"orders","held":true,"owner":"w","fencing_token":9,"ttl_ms":10000,"index":9}`},
		"GET /v1/locks": {200, `{"locks":[{"name":"orders","held":true,"owner":"w","fencing_token":9,"ttl_ms":10000,"index":9},
			{"name":"schema","held":true,"mode":"shared","owner":"r1","fencing_token":5,"ttl_ms":30000,"index":7,` + sharedHolders + `}],"truncated":false,"index":9}`},
	})
	const holdersJSON = `"holders":\[\{"owner":"r1","fencing_token":5,"ttl_ms":30000,"remaining_ms":1000\},\{"owner":"r2","fencing_token":7,"ttl_ms":30000\}\]`
	steps := []step{
		{name: "get, text", args: args("get", "schema"),
			stdout: `^schema: held shared by 2 holders\n  "r1", token 5, ttl 30s, 1s left\n  "r2", token 7, ttl 30s\n$`},
		{name: "get, json", args: args("get", "--json", "schema"),
			stdout: `^\{"name":"schema","held":true,"owner":"r1","fencing_token":5,"ttl_ms":30000,"index":7,"mode":"shared",` + holdersJSON + `\}\n$`},
		{name: "get exclusive, text as before", args: args("get", "orders"), stdout: `^orders: held by "w", token 9, ttl 10s\n$`},
		{name: "get exclusive, json as before", args: args("get", "--json", "orders"),
			stdout: `^\{"name":"orders","held":true,"owner":"w","fencing_token":9,"ttl_ms":10000,"index":9\}\n$`},
		{name: "list, text", args: args("list"),
			stdout: `^NAME +OWNER +TOKEN +TTL +MODE\norders +w +9 +10s +exclusive\nschema +r1 +5 +30s +shared\nschema +r2 +7 +30s +shared\n$`},
		{name: "list, json", args: args("list", "--json"),
			stdout: `^\{"locks":\[\{"name":"orders","held":true,"owner":"w","fencing_token":9,"ttl_ms":10000,"index":9\},` +
				`\{"name":"schema","held":true,"owner":"r1","fencing_token":5,"ttl_ms":30000,"index":7,"mode":"shared",` + holdersJSON + `\}\],"truncated":false,"index":9\}\n$`},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.run(t, base) })
	}
}
