package api_test

import (
	"fmt"
	"testing"
)

// TestResultGuardStringEscapes: the guard counts a json value's elements
// on its text with the strings taken out; strings that end in an escaped
// backslash or hold escaped quotes, brackets and commas must neither hide
// the elements after them (a 4 MiB json of 1.39M empty objects passing
// as text again) nor count as elements themselves.
func TestResultGuardStringEscapes(t *testing.T) {
	r := startReplica(t, true)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	huge := `SELECT ($$["a\\", "b\"c", "[{,,,}]\\\"", $$ || repeat('{},', 1390000) || '{}]')::json`
	got := execHTTP(t, r, fence, l.token, fmt.Sprintf(`{"sql":%q}`, huge))
	if got.code == 200 {
		t.Errorf("1.39M elements behind escaped strings: HTTP 200, want the result refused over the limit")
	}
	// 200k commas inside strings: text of 1.2 MB, no elements to speak of.
	commas := `SELECT ('["' || repeat('\",[{', 200000) || '"]')::json`
	if got := execHTTP(t, r, fence, l.token, fmt.Sprintf(`{"sql":%q}`, commas)); got.code != 200 {
		t.Errorf("a json string full of escaped quotes, commas and brackets: HTTP %d %v, want 200 (weighed as text)", got.code, got.body)
	}
}
