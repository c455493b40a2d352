package main

import (
	"strings"
	"testing"
)

// TestRedTeam15VersionIgnoresBadEnvironment: `fencectl version` printed
// the version whatever the environment held; it now parses every
// FENCECTL_* variable (runVersion), and checkGlobals=false only skips the
// globals' validation, not a value that does not parse: a typed global
// (a duration, a bool) set to something else makes version exit 2,
// which runVersion's doc says it must not ("a bad FENCECTL_ENDPOINT must
// not hide the version").
func TestRedTeam15VersionIgnoresBadEnvironment(t *testing.T) {
	for _, env := range []string{"FENCECTL_DIAL_TIMEOUT=5", "FENCECTL_COMMAND_TIMEOUT=soon"} {
		got, code := fencectl(t, []string{env}, "version")
		if code != 0 || !strings.HasPrefix(got, "fencectl ") {
			t.Errorf("%s fencectl version: got status %d, output %q; want 0 and the version", env, code, got)
		}
	}
}
