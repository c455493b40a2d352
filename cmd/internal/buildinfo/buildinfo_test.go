package buildinfo

import (
	"runtime"
	"testing"
)

func TestStampedWins(t *testing.T) {
	if got := Version("v1.2.3"); got != "v1.2.3" {
		t.Errorf("Version: got %q, want the stamped v1.2.3", got)
	}
	if got := Commit("0123abc"); got != "0123abc" {
		t.Errorf("Commit: got %q, want the stamped 0123abc", got)
	}
	// A test binary has no module version: "devel".
	if got := Version(""); got != "devel" {
		t.Errorf("Version of a test binary: got %q, want devel", got)
	}
}

func TestLine(t *testing.T) {
	for _, tc := range []struct{ commit, want string }{
		{"0123abc", "fencectl v1 (commit 0123abc, " + runtime.Version() + ")"},
		{"", "fencectl v1 (commit unknown, " + runtime.Version() + ")"},
	} {
		if got := Line("fencectl", "v1", tc.commit); got != tc.want {
			t.Errorf("Line(commit %q): got %q, want %q", tc.commit, got, tc.want)
		}
	}
}
