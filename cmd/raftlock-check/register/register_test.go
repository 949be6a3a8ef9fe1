package register

import "testing"

func TestFencedRefusesStaleAndUnfencedLoses(t *testing.T) {
	s := New()
	for _, fenced := range []bool{true, false} {
		a := s.Access(false, Request{Fenced: fenced, Name: "L", Token: 5, Op: "a-read"})
		// A newer holder reads and writes while the old one is paused.
		b := s.Access(false, Request{Fenced: fenced, Name: "L", Token: 9, Op: "b-read"})
		bw := s.Access(true, Request{Fenced: fenced, Name: "L", Token: 9, Based: b.Version, Op: "b-write"})
		// The old holder wakes and writes with its old token.
		aw := s.Access(true, Request{Fenced: fenced, Name: "L", Token: 5, Based: a.Version, Op: "a-write"})
		if !bw.Accepted {
			t.Fatalf("fenced=%v: the newer holder's write was refused", fenced)
		}
		if fenced && (aw.Accepted || len(aw.Lost) != 0) {
			t.Fatalf("fenced register accepted a stale write: %+v", aw)
		}
		if !fenced && (!aw.Accepted || len(aw.Lost) != 1 || aw.Lost[0] != "b-write") {
			t.Fatalf("unfenced register should lose b-write: %+v", aw)
		}
	}
	if n := len(s.Log()); n != 8 {
		t.Fatalf("log has %d entries, want 8", n)
	}
}

// The fenced register uses client/fence's rule: a token is accepted once, so
// a holder's second write under one token is refused.
func TestFencedAcceptsATokenOnce(t *testing.T) {
	s := New()
	r := s.Access(false, Request{Fenced: true, Name: "L", Token: 7, Op: "read"})
	w := s.Access(true, Request{Fenced: true, Name: "L", Token: 7, Based: r.Version, Op: "write"})
	again := s.Access(true, Request{Fenced: true, Name: "L", Token: 7, Based: w.Version, Op: "again", Again: true})
	if !r.Accepted || !w.Accepted {
		t.Fatalf("the holder's read and first write: %+v %+v", r, w)
	}
	if again.Accepted || !again.Again {
		t.Fatalf("second write under one token: %+v", again)
	}
	if reread := s.Access(false, Request{Fenced: true, Name: "L", Token: 7, Op: "reread"}); reread.Accepted {
		t.Fatalf("second read under one token: %+v", reread)
	}
}
