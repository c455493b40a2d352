package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestParseConfigFlags: a mistake on the command line is one line, found
// before any server starts (main exits 2 with it).
func TestParseConfigFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string // "" for none
	}{
		{[]string{"--quick"}, ""},
		{[]string{"--bogus"}, "unknown flag --bogus"},
		{[]string{"--dration=5s"}, "unknown flag --dration; did you mean --duration?"},
		{[]string{"--duration=5"}, `--duration="5": want a duration such as 500ms, 5s or 1m30s`},
		{[]string{"extra"}, `unexpected argument "extra": fencebench takes flags only`},
		{[]string{"--reps=-1"}, "--reps=-1 is negative: want 0 (the default) or more"},
		{[]string{"--duration=-1s"}, "--duration=-1s is negative: want 0 (the default) or more"},
		{[]string{"--kill-trials=-3"}, "--kill-trials=-3 is negative: want 0 (the default) or more"},
		{[]string{"--only=lod"}, `--only: unknown part "lod"`},
	} {
		_, err := parseConfig(tt.args)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: got error %v, want none", tt.args, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want):
			t.Errorf("%q: got error %v, want %q", tt.args, err, tt.want)
		}
	}
}
