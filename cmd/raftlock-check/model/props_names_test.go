package model

import "testing"

// Every property letter has a short name, and no two share one: the report
// prints it beside the letter.
func TestEveryPropertyHasOneShortName(t *testing.T) {
	seen := map[string]string{}
	for c := 'a'; c <= 'n'; c++ {
		id := string(c)
		name := PropertyName(id)
		if name == "" {
			t.Errorf("(%s) has no short name", id)
			continue
		}
		if other, ok := seen[name]; ok {
			t.Errorf("(%s) and (%s) are both %q", other, id, name)
		}
		seen[name] = id
	}
	if len(propertyNames) != len(seen) {
		t.Errorf("%d names for %d properties", len(propertyNames), len(seen))
	}
}
