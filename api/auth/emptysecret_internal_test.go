package auth

import "testing"

// TestEmptySecretIsNoCredential: a secret that is empty once trimmed
// ("Bearer " and non-breaking spaces) matches no token, even one whose
// hash is the empty string's (parseTokens refuses such a line; this is
// the second line of defence). Found by a red-team review, 2026-11-28.
func TestEmptySecretIsNoCredential(t *testing.T) {
	ts := &tokenSet{principals: []string{"token:cron"}, sums: [][32]byte{emptySecret}}
	if p, ok := ts.lookup(""); ok {
		t.Errorf("lookup of the empty secret: got %q, want no principal", p)
	}
	if _, err := parseTokens("tokens", []byte("cron e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n")); err == nil {
		t.Errorf("parseTokens of the empty secret's hash: got no error")
	}
}
