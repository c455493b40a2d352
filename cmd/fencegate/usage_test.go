package main

import (
	"bytes"
	"strings"
	"testing"
)

// fencegateCLI runs fencegate with args as main does and returns what it
// printed on stderr and its exit status.
func fencegateCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), args, &stdout, &stderr)
	code := exitStatus(err, &stderr)
	return stderr.String(), code
}

// TestUsageErrors: a mistake on the command line, whether the flag
// package or fencegate's own checks find it, exits 2 with one line naming
// the flag and a pointer to the command's --help; a failure at run time
// exits 1.
func TestUsageErrors(t *testing.T) {
	const pg = "--postgres-dsn=postgres://x@127.0.0.1:1/x"
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		want     string // the whole of stderr
	}{
		{"unknown flag", []string{"serve", "--bogus"}, nil, 2, "fencegate serve: unknown flag --bogus\nRun 'fencegate serve --help' for usage.\n"},
		{"unknown flag, near one", []string{"serve", "--etcd-endpoint=x"}, nil, 2, "fencegate serve: unknown flag --etcd-endpoint; did you mean --etcd-endpoints?\nRun 'fencegate serve --help' for usage.\n"},
		{"bad duration", []string{"serve", "--shutdown-timeout=5"}, nil, 2, "fencegate serve: --shutdown-timeout=\"5\": want a duration such as 500ms, 5s or 1m30s\nRun 'fencegate serve --help' for usage.\n"},
		{"stray argument", []string{"serve", "extra"}, nil, 2, "fencegate serve: unexpected argument \"extra\": serve takes flags only\nRun 'fencegate serve --help' for usage.\n"},
		{"bad env", []string{"serve"}, map[string]string{"FENCEGATE_MAX_STATEMENTS": "many"}, 2, "fencegate serve: FENCEGATE_MAX_STATEMENTS=\"many\" (--max-statements): want an integer\nRun 'fencegate serve --help' for usage.\n"},
		{"no backend", []string{"serve"}, nil, 2, "fencegate serve: no backend configured: set --postgres-dsn or --redis-addr (or FENCEGATE_POSTGRES_DSN, FENCEGATE_REDIS_ADDR)\nRun 'fencegate serve --help' for usage.\n"},
		{"out of range", []string{"serve", pg, "--max-statements=0"}, nil, 2, "fencegate serve: --max-statements=0: want at least 1\nRun 'fencegate serve --help' for usage.\n"},
		{"out of range, once checked by the backend late", []string{"serve", pg, "--max-result-rows=-1"}, nil, 2, "fencegate serve: --max-result-rows=-1: want at least 1, or 0 for the default\nRun 'fencegate serve --help' for usage.\n"},
		{"zero dial timeout", []string{"serve", pg, "--etcd-dial-timeout=0s"}, nil, 2, "fencegate serve: --etcd-dial-timeout=0s: want a positive duration\nRun 'fencegate serve --help' for usage.\n"},
		{"negative shutdown timeout", []string{"serve", pg, "--shutdown-timeout=-1s"}, nil, 2, "fencegate serve: --shutdown-timeout=-1s: want a duration from 0\nRun 'fencegate serve --help' for usage.\n"},
		{"bad log level", []string{"serve", pg, "--log-level=loud"}, nil, 2, "fencegate serve: --log-level \"loud\": want debug, info, warn or error\nRun 'fencegate serve --help' for usage.\n"},
		{"flags that need another", []string{"serve", "--redis-addr=127.0.0.1:1", "--pg-listen-addr=127.0.0.1:0"}, nil, 2, "fencegate serve: --pg-listen-addr needs --postgres-dsn: the database its clients reach\nRun 'fencegate serve --help' for usage.\n"},
		{"password in plain text", []string{"serve", pg, "--etcd-endpoints=http://10.0.0.1:2379", "--etcd-password=p"}, nil, 2, "fencegate serve: --etcd-password would go in plain text to http://10.0.0.1:2379: use https:// endpoints with --etcd-cacert (or --insecure)\nRun 'fencegate serve --help' for usage.\n"},
		// Were exit 1 at start-up, naming a Go field, or accepted with
		// --redis-addr alone.
		{"unknown statement kind", []string{"serve", "--redis-addr=127.0.0.1:1", "--postgres-allow-sql=truncate,drop"}, nil, 2, "fencegate serve: --postgres-allow-sql=\"truncate,drop\": unknown statement kind \"drop\": want \"ddl\", \"lock\", \"truncate\"\nRun 'fencegate serve --help' for usage.\n"},
		{"command never allowed", []string{"serve", "--redis-addr=127.0.0.1:1", "--redis-allow=flushall"}, nil, 2, "fencegate serve: --redis-allow=\"flushall\": fencegate never allows FLUSHALL: administrative commands are not allowed\nRun 'fencegate serve --help' for usage.\n"},
		{"dev port", []string{"dev", "--postgres-port=70000"}, nil, 2, "fencegate dev: --postgres-port=70000: want a TCP port (1-65535), or 0 for a free one\nRun 'fencegate dev --help' for usage.\n"},
		{"migrate without dsn", []string{"migrate"}, nil, 2, "fencegate migrate: --postgres-dsn (or FENCEGATE_POSTGRES_DSN) is required: an admin's connection string\nRun 'fencegate migrate --help' for usage.\n"},
		{"grant without login", []string{"grant", "--postgres-dsn=postgres://x"}, nil, 2, "fencegate grant: --login is required: the role fencegate logs in as\nRun 'fencegate grant --help' for usage.\n"},
		{"version with an argument", []string{"version", "extra"}, nil, 2, "fencegate version: unexpected argument \"extra\": version takes none\nRun 'fencegate version --help' for usage.\n"},
		{"unreadable file: a runtime failure", []string{"serve", pg, "--cert-file=/nonexistent.pem", "--key-file=/nonexistent-key.pem"}, nil, 1, "fencegate: --cert-file /nonexistent.pem: no such file or directory\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, code := fencegateCLI(t, tt.args...)
			if code != tt.wantCode || got != tt.want {
				t.Errorf("fencegate %s:\ngot status %d, stderr\n%s\nwant status %d, stderr\n%s", strings.Join(tt.args, " "), code, got, tt.wantCode, tt.want)
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
		{[]string{"serv"}, `fencegate: unknown command "serv"; did you mean "serve"?`},
		{[]string{"mirgate"}, `fencegate: unknown command "mirgate"; did you mean "migrate"?`},
		{[]string{"gr"}, `fencegate: unknown command "gr"; did you mean "grant"?`},
		{[]string{"frobnicate"}, `fencegate: unknown command "frobnicate"`},
		{[]string{"-v"}, `fencegate: unknown command "-v": flags go after the command, as in 'fencegate serve --help'`},
		{[]string{"help", "sreve"}, `fencegate: unknown command "sreve"; did you mean "serve"?`},
	} {
		got, code := fencegateCLI(t, tt.args...)
		if want := tt.want + "\nRun 'fencegate --help' for usage.\n"; code != 2 || got != want {
			t.Errorf("fencegate %s: got status %d, stderr %q; want 2, %q", strings.Join(tt.args, " "), code, got, want)
		}
	}
}

// TestHelpCommand: `fencegate help CMD` is CMD's --help, on stdout.
func TestHelpCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"help", "migrate"}, &stdout, &stderr)
	if code := exitStatus(err, &stderr); code != 0 {
		t.Fatalf("got status %d (%v), want 0", code, err)
	}
	if !strings.HasPrefix(stdout.String(), "Usage: fencegate migrate [flags]") {
		t.Errorf("got stdout %q, want migrate's usage", stdout.String())
	}
}

// TestFlagsNamedWhenEtcdUnreachable: an etcd that never answers is one
// line naming the flags that say where it is and how long to wait.
func TestFlagsNamedWhenEtcdUnreachable(t *testing.T) {
	got, code := fencegateCLI(t, "serve", "--postgres-dsn=postgres://x@127.0.0.1:1/x", "--etcd-endpoints=127.0.0.1:1", "--etcd-dial-timeout=300ms")
	want := "fencegate: etcd at 127.0.0.1:1 is unreachable: no answer within --etcd-dial-timeout 300ms (check --etcd-endpoints, or raise --etcd-dial-timeout)\n"
	if code != 1 || got != want {
		t.Errorf("got status %d, stderr %q; want 1, %q", code, got, want)
	}
}
