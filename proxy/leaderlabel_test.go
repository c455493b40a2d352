package proxy

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLeaderLabel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"worker-1", "worker-1"},
		{strings.Repeat("a", 100), strings.Repeat("a", maxLeaderLabel)},
		{"bad\xffbyte", "bad\uFFFDbyte"},
		// Cut in the middle of a multi-byte character.
		{strings.Repeat("a", maxLeaderLabel-1) + "é", strings.Repeat("a", maxLeaderLabel-1) + "\uFFFD"},
	} {
		got := leaderLabel(tc.in)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("leaderLabel(%q): got %q, want %q", tc.in, got, tc.want)
		}
	}
}
