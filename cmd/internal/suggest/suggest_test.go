package suggest

import (
	"slices"
	"testing"
)

func TestClosest(t *testing.T) {
	commands := []string{"fences", "fence", "status", "watch", "run", "version", "help"}
	for _, tc := range []struct {
		input string
		want  []string
	}{
		{"stauts", []string{"status"}},         // swapped letters: one edit
		{"statsu", []string{"status"}},         // one swap
		{"Status", []string{"status"}},         // case is ignored
		{"wat", []string{"watch"}},             // a unique prefix
		{"ver", []string{"version"}},           // a unique prefix, 4 edits away
		{"fenc", []string{"fence"}},            // a prefix of two: the nearest
		{"fnces", []string{"fences"}},          // one deletion
		{"rnu", []string{"run"}},               // one swap
		{"frobnicate", nil},                    // nothing close
		{"", nil},                              // nothing typed
		{"xx", nil},                            // three edits from run
		{"fense", []string{"fence"}},           // one substitution; fences is two
		{"fencs", []string{"fences", "fence"}}, // a tie: both, in order
	} {
		if got := Closest(tc.input, commands); !slices.Equal(got, tc.want) {
			t.Errorf("Closest(%q): got %q, want %q", tc.input, got, tc.want)
		}
	}
}

func TestHint(t *testing.T) {
	for _, tc := range []struct {
		input, format, want string
	}{
		{"serv", "%q", `; did you mean "serve"?`},
		{"etcd-endpoint", "--%s", "; did you mean --etcd-endpoints?"},
		{"zzz", "%q", ""},
	} {
		if got := Hint(tc.input, []string{"serve", "dev", "etcd-endpoints"}, tc.format); got != tc.want {
			t.Errorf("Hint(%q): got %q, want %q", tc.input, got, tc.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"abc", "", 3},
		{"kitten", "sitting", 3},
		{"stauts", "status", 1},
		{"ab", "ba", 1},
		{"mïgrate", "migrate", 1},
	} {
		if got := distance(tc.a, tc.b); got != tc.want {
			t.Errorf("distance(%q, %q): got %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
