package httpapi

import (
	"fmt"
	"reflect"
	"testing"
	"unicode/utf8"
)

// decodeCorpus are bodies the fast path must judge exactly as the strict
// one: plain ones it takes, and every kind it must leave to the strict path.
var decodeCorpus = []string{
	`{"name":"a/b","owner":"w1","lease_id":"0123456789abcdef0123456789abcdef","ttl_ms":10000}`,
	` { "name" : "a" , "lease_id" : "0123456789abcdef0123456789abcdef" , "ttl_ms" : 5000 } `,
	`{"name":"a","ttl_ms":5000,"wait_ms":0,"mode":"shared","value":"v \" \\ \n"}`,
	`{"name":"a","ttl_ms":5000,"value":null}`,
	`{}`, ``, `   `, `[]`, `null`, `"x"`, `{"name":"a"} {}`, `{"name":"a"}}`, `{"name":"a"]`,
	`{"name":"a","name":"b","ttl_ms":5000}`,
	`{"NAME":"a","ttl_ms":5000}`, `{"Name":"a","ttl_ms":5000}`,
	`{"nam\u0065":"a","ttl_ms":5000}`,
	`{"name":"\ud800","ttl_ms":5000}`, `{"name":"\ud83d\ude00","ttl_ms":5000}`, `{"name":"\u00e9","ttl_ms":5000}`,
	`{"name":"a","ttl_ms":"5000"}`, `{"name":"a","ttl_ms":5000.5}`, `{"name":"a","ttl_ms":1e3}`,
	`{"name":"a","ttl_ms":tru}`, `{"name":"a","ttl_ms":true}`, `{"name":"a","ttl_ms":-}`,
	`{"name":"a","ttl_ms":5000,}`, `{"name":"a",,"ttl_ms":5000}`, `{"name" "a"}`, `{"name":}`,
	`{"name":{"x":1},"ttl_ms":5000}`, `{"name":["a"],"ttl_ms":5000}`,
	`{"name":"a","ttl_ms":5000,"extra":1}`, `{"name":"a","ttl_ms":5000,"force":true}`,
	`{"name":"a","ttl_ms":99999999999999999999}`, `{"name":"a","ttl_ms":5000`,
	`{"name":"a\`, `{"name":"a","ttl_ms":5000}x`, `{"name":"","ttl_ms":5000}`,
	"{\"name\":\"a\tb\",\"ttl_ms\":5000}", "{\"name\":\"a\",\r\n\"ttl_ms\":5000}",
}

// TestDecodeFastPathMatchesStrict: for every body and request type, decode
// (fast path first) and decodeStrict agree on the error text and, without
// one, on the value.
func TestDecodeFastPathMatchesStrict(t *testing.T) {
	for _, body := range decodeCorpus {
		checkDecodeAgrees(t, []byte(body))
	}
}

func FuzzDecodeFastPathMatchesStrict(f *testing.F) {
	for _, body := range decodeCorpus {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecodeAgrees(t, body) })
}

func checkDecodeAgrees(t *testing.T, body []byte) {
	t.Helper()
	for _, mk := range []func() validator{
		func() validator { return new(acquireRequest) },
		func() validator { return new(renewRequest) },
		func() validator { return new(releaseRequest) },
	} {
		fast, strict := mk(), mk()
		ef := decode(body, fast)
		var es error
		if utf8.Valid(body) {
			es = decodeStrict(body, strict)
		} else {
			es = decode(body, strict) // the UTF-8 check comes before either path
		}
		if fmt.Sprint(ef) != fmt.Sprint(es) {
			t.Errorf("%T %q: decode error %v, strict %v", fast, body, ef, es)
			continue
		}
		if ef == nil && !reflect.DeepEqual(fast, strict) {
			t.Errorf("%T %q: decode %+v, strict %+v", fast, body, fast, strict)
		}
	}
}

// TestPlainObject: the fast path takes what clients send, and leaves escapes
// in names, \u escapes, nesting, repeats and unknown names to the strict one.
func TestPlainObject(t *testing.T) {
	known := jsonNames(reflect.TypeOf(acquireRequest{}))
	for body, want := range map[string]bool{
		decodeCorpus[0]: true, decodeCorpus[1]: true, decodeCorpus[2]: true, decodeCorpus[3]: true, `{}`: true,
		`{"name":"a","ttl_ms":tru}`: true, // syntax is json.Unmarshal's to judge
		`{"nam\u0065":"a"}`:         false, `{"name":"\u00e9"}`: false, `{"name":{"x":1}}`: false,
		`{"name":"a","name":"b"}`: false, `{"Name":"a"}`: false, `{"extra":1}`: false,
		`{"name":"a"} {}`: false, `{"name":"a"`: false, `{"name":"a\`: false, ``: false, `[]`: false,
	} {
		if got := plainObject([]byte(body), known); got != want {
			t.Errorf("plainObject(%s) = %v, want %v", body, got, want)
		}
	}
}
