package proxy

import (
	"slices"
	"testing"

	"github.com/fencegate/fencegate/election"
)

func TestElectionLabels(t *testing.T) {
	tests := []struct {
		names []string
		want  []string
	}{
		{[]string{"a", "b"}, []string{"a", "b"}},
		{[]string{"a\xff"}, []string{"a\uFFFD"}},
		// Sorted as the sources list them; the valid name keeps its label
		// whatever the order, and only the first replaced one of a kind
		// gets a label.
		{[]string{"a\x80", "a\xff", "a\uFFFD"}, []string{"", "", "a\uFFFD"}},
		{[]string{"a\x80", "a\xff"}, []string{"a\uFFFD", ""}},
		{[]string{"\xff\xfe", "x"}, []string{"\uFFFD", "x"}},
	}
	for _, tt := range tests {
		terms := make([]election.Term, len(tt.names))
		for i, n := range tt.names {
			terms[i] = election.Term{Election: n}
		}
		if got := electionLabels(terms); !slices.Equal(got, tt.want) {
			t.Errorf("electionLabels(%q): got %q, want %q", tt.names, got, tt.want)
		}
	}
}
