package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
)

func TestBenchErrKindUnknownOutcome(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&client.APIError{Status: 504, Code: client.CodeUnknownOutcome}, kindUnknown},
		{fmt.Errorf("%w: reset", client.ErrUnknownOutcome), kindUnknown},
		{&client.APIError{Status: 429, Code: client.CodeOverloaded}, kindOverloaded},
	} {
		if got := errKind(c.err); got != c.want {
			t.Errorf("errKind(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestBenchReportShedOnItsOwnLine(t *testing.T) {
	b := newBench(benchConfig{workers: 2, locks: 2, duration: time.Second, ttl: time.Second}, nil, time.Second)
	b.fail(&client.APIError{Status: 429, Code: client.CodeOverloaded})
	b.fail(&client.APIError{Status: 429, Code: client.CodeOverloaded})
	b.fail(&client.APIError{Status: 504, Code: client.CodeUnknownOutcome})
	rep := b.report([]workerSamples{{shed: []time.Duration{2 * time.Millisecond, 4 * time.Millisecond}}}, time.Second)
	var out bytes.Buffer
	rep.print(&out, "test")
	text := out.String()
	for _, want := range []string{"overloaded (429, shed): 2\n", "errors: unknown_outcome 1\n", "\nshed "} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if rep.Ops["shed"].Count != 2 || rep.Ops["shed"].Max != 4 {
		t.Errorf("shed stats %+v, want 2 answers, max 4 ms", rep.Ops["shed"])
	}
}
