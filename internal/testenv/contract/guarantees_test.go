package contract

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every time promise in docs/API.md's "Time and fencing guarantees" table
// names the tests that fail when it breaks, as `dir.TestName` (dir relative
// to the repository root). A row that names no test, or a test that does not
// exist (renamed, deleted), fails here: a promise without a test is a guess.
func TestEveryTimePromiseNamesTestsThatExist(t *testing.T) {
	root := filepath.Join(filepath.Dir(specPath(t)), "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "API.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := guaranteeRows(t, string(doc))
	if len(rows) < 7 {
		t.Fatalf("the time guarantees table has %d rows, want at least 7 (lease end, failover, session end, lock-delay, waiter wake-up, blocking-read wake-up, leader-kill recovery)", len(rows))
	}
	ref := regexp.MustCompile("`([a-z][a-z0-9/-]*)\\.(Test[A-Za-z0-9_]+)`")
	for _, row := range rows {
		refs := ref.FindAllStringSubmatch(row, -1)
		if len(refs) == 0 {
			t.Errorf("promise names no test: %s", row)
		}
		for _, r := range refs {
			if !testExists(t, filepath.Join(root, r[1]), r[2]) {
				t.Errorf("promise names %s.%s, which does not exist: %s", r[1], r[2], row)
			}
		}
	}
}

// guaranteeRows returns the body rows of the first table in the "Time and
// fencing guarantees" section.
func guaranteeRows(t *testing.T, doc string) []string {
	_, section, ok := strings.Cut(doc, "\n## Time and fencing guarantees\n")
	if !ok {
		t.Fatal(`docs/API.md has no "## Time and fencing guarantees" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []string
	inTable := false
	for _, line := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(line, "|"):
			if inTable && !strings.HasPrefix(line, "| ---") && !strings.HasPrefix(line, "|---") {
				rows = append(rows, line)
			}
			inTable = true
		case inTable:
			return rows // the header row is never appended
		}
	}
	if len(rows) == 0 {
		t.Fatal("no table in the time guarantees section")
	}
	return rows
}

// testExists says whether dir holds a _test.go file declaring func name.
func testExists(t *testing.T, dir, name string) bool {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "\nfunc "+name+"(") {
			return true
		}
	}
	return false
}
