package main

import (
	"net"
	"strings"
	"testing"
)

// TestUsageErrors: a mistake on the command line, whether the flag
// package, the globals' checks or a command's own find it, exits 2 with
// one line naming the flag and a pointer to the command's --help.
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		args []string
		want string // the whole output
	}{
		{"unknown flag", nil, []string{"fences", "--bogus"}, "fencectl fences: unknown flag --bogus\nRun 'fencectl fences --help' for usage.\n"},
		{"unknown flag, near one", nil, []string{"status", "--etcd-endpoint=x"}, "fencectl status: unknown flag --etcd-endpoint; did you mean --etcd-endpoints?\nRun 'fencectl status --help' for usage.\n"},
		{"unknown global flag", nil, []string{"--bogus", "fences"}, "fencectl: unknown flag --bogus\nRun 'fencectl --help' for usage.\n"},
		{"bad duration", nil, []string{"status", "--dial-timeout=5"}, "fencectl status: --dial-timeout=\"5\": want a duration such as 500ms, 5s or 1m30s\nRun 'fencectl status --help' for usage.\n"},
		{"bad env", []string{"FENCECTL_DIAL_TIMEOUT=soon"}, []string{"status"}, "fencectl status: FENCECTL_DIAL_TIMEOUT=\"soon\" (--dial-timeout): want a duration such as 500ms, 5s or 1m30s\nRun 'fencectl status --help' for usage.\n"},
		{"stray argument", nil, []string{"fences", "extra"}, "fencectl fences: unexpected argument \"extra\"\nRun 'fencectl fences --help' for usage.\n"},
		{"bad -w", nil, []string{"status", "-w", "yaml"}, "fencectl status: --write-out \"yaml\": want table or json\nRun 'fencectl status --help' for usage.\n"},
		{"zero timeout", nil, []string{"status", "--dial-timeout=0s"}, "fencectl status: --dial-timeout 0s: want a positive duration\nRun 'fencectl status --help' for usage.\n"},
		{"empty endpoints", nil, []string{"--etcd-endpoints=", "watch"}, "fencectl watch: --etcd-endpoints is empty\nRun 'fencectl watch --help' for usage.\n"},
		{"cert without key", nil, []string{"fences", "--cert=c.pem"}, "fencectl fences: --cert and --key go together\nRun 'fencectl fences --help' for usage.\n"},
		{"negative refusal interval", nil, []string{"watch", "--refusal-interval=-1s"}, "fencectl watch: --refusal-interval -1s is negative: want a period, or 0 not to read refusals\nRun 'fencectl watch --help' for usage.\n"},
		{"watch election with a slash", nil, []string{"watch", "--election=a/b"}, "fencectl watch: --election \"a/b\": want an election name, without '/'\nRun 'fencectl watch --help' for usage.\n"},
		{"run without --election", nil, []string{"run", "--", "true"}, "fencectl run: --election is required\nRun 'fencectl run --help' for usage.\n"},
		{"run with a bad --ttl", nil, []string{"run", "--election=e", "--ttl=1500ms", "--", "true"}, "fencectl run: --ttl 1.5s: want a whole number of seconds, at least 1s\nRun 'fencectl run --help' for usage.\n"},
		{"run with a bad --kill-margin", nil, []string{"run", "--election=e", "--ttl=4s", "--kill-margin=3s", "--", "true"}, "fencectl run: --kill-margin 3s: want more than 0 and at most half of --ttl 4s\nRun 'fencectl run --help' for usage.\n"},
		{"run without CMD", nil, []string{"run", "--election=e"}, "fencectl run: no command to run; want 'fencectl run --election NAME -- CMD [ARGS...]'\nRun 'fencectl run --help' for usage.\n"},
		{"fence without subcommand", nil, []string{"fence"}, "fencectl fence: want 'fence get NAME' or 'fence reset NAME --to N'\nRun 'fencectl fence get --help' or 'fencectl fence reset --help' for usage.\n"},
		{"fence, mistyped subcommand", nil, []string{"fence", "gte", "x"}, "fencectl fence: unknown subcommand \"gte\": want 'fence get NAME' or 'fence reset NAME --to N'; did you mean \"get\"?\nRun 'fencectl fence get --help' or 'fencectl fence reset --help' for usage.\n"},
		{"fence get without a name", nil, []string{"fence", "get"}, "fencectl fence get: want one fence name, got 0 arguments\nRun 'fencectl fence get --help' for usage.\n"},
		{"fence get, bad name", nil, []string{"fence", "get", "bad name!"}, "fencectl fence get: fence name \"bad name!\": want letters, digits, '.', '_' and '-', starting with a letter or digit\nRun 'fencectl fence get --help' for usage.\n"},
		{"fence reset, bad name", nil, []string{"fence", "reset", "a/b", "--to=0"}, "fencectl fence reset: fence name \"a/b\": want letters, digits, '.', '_' and '-', starting with a letter or digit\nRun 'fencectl fence reset --help' for usage.\n"},
		{"fence reset, bad --to", nil, []string{"fence", "reset", "x", "--to=-1"}, "fencectl fence reset: --to \"-1\": want a decimal integer from 0\nRun 'fencectl fence reset --help' for usage.\n"},
		{"version with an argument", nil, []string{"version", "extra"}, "fencectl version: unexpected argument \"extra\"\nRun 'fencectl version --help' for usage.\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, code := fencectl(t, tt.env, tt.args...)
			if code != 2 || got != tt.want {
				t.Errorf("fencectl %s:\ngot status %d, output\n%s\nwant status 2, output\n%s", strings.Join(tt.args, " "), code, got, tt.want)
			}
		})
	}
}

// TestUnknownCommand: a mistyped command gets the one it was likely
// meant to be, as git and kubectl do, and exits 2.
func TestUnknownCommand(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"stauts"}, `fencectl: unknown command "stauts"; did you mean "status"?`},
		{[]string{"wath"}, `fencectl: unknown command "wath"; did you mean "watch"?`},
		{[]string{"ver"}, `fencectl: unknown command "ver"; did you mean "version"?`},
		{[]string{"fencs"}, `fencectl: unknown command "fencs"; did you mean "fences" or "fence"?`},
		{[]string{"frobnicate"}, `fencectl: unknown command "frobnicate"`},
		{[]string{"help", "stat"}, `fencectl: unknown command "stat"; did you mean "status"?`},
	} {
		got, code := fencectl(t, nil, tt.args...)
		if want := tt.want + "\nRun 'fencectl --help' for usage.\n"; code != 2 || got != want {
			t.Errorf("fencectl %s: got status %d, output %q; want 2, %q", strings.Join(tt.args, " "), code, got, want)
		}
	}
}

// TestHelpCommand: `fencectl help CMD` is CMD's --help; version takes
// the global flags, and ignores a bad one from the environment.
func TestHelpCommand(t *testing.T) {
	got, code := fencectl(t, nil, "help", "watch")
	if code != 0 || !strings.HasPrefix(got, "Usage: fencectl watch [flags]\n") {
		t.Errorf("fencectl help watch: got status %d, output %q; want 0 and watch's usage", code, got)
	}
	got, code = fencectl(t, []string{"FENCECTL_WRITE_OUT=yaml"}, "version", "--endpoint=127.0.0.1:1")
	if code != 0 || !strings.HasPrefix(got, "fencectl ") {
		t.Errorf("fencectl version: got status %d, output %q; want 0 and the version", code, got)
	}
}

// TestFlagsNamedWhenEtcdUnreachable: an etcd that never answers is one
// line naming the flags that say where it is and how long to wait.
func TestFlagsNamedWhenEtcdUnreachable(t *testing.T) {
	// Accepts connections and never answers, as a partitioned etcd.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	for _, cmd := range []string{"watch", "run"} {
		args := []string{cmd, "--etcd-endpoints=" + addr, "--dial-timeout=300ms"}
		if cmd == "run" {
			args = append(args, "--election=e", "--", "true")
		}
		got, code := fencectl(t, nil, args...)
		want := "fencectl: etcd at " + addr + " is unreachable: no answer within --dial-timeout 300ms (check --etcd-endpoints, or raise --dial-timeout)\n"
		if code != 1 || got != want {
			t.Errorf("fencectl %s: got status %d, output %q; want 1, %q", cmd, code, got, want)
		}
	}
}
