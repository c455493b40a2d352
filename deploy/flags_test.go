package deploy_test

import (
	"net"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
)

var helpFlag = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

var helps = struct {
	sync.Mutex
	flags map[string]map[string]bool
}{flags: map[string]map[string]bool{}}

// commandFlags is the set of flags `fencegate <command> --help` lists, of
// the fencegate this tree builds.
func commandFlags(t *testing.T, command string) map[string]bool {
	t.Helper()
	bin := fencegateBinary(t)
	helps.Lock()
	defer helps.Unlock()
	if f, ok := helps.flags[command]; ok {
		return f
	}
	out, err := exec.Command(bin, command, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("fencegate %s --help: %v\n%s", command, err, out)
	}
	flags := map[string]bool{}
	for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["postgres-dsn"] {
		t.Fatalf("fencegate %s --help: got flags %v, want --postgres-dsn among them", command, flags)
	}
	helps.flags[command] = flags
	return flags
}

// serveFlags is commandFlags(t, "serve").
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	return commandFlags(t, "serve")
}

// serveArgs is the flags of a `fencegate serve` command line, by name
// (values "" for a flag without one). Bad arguments are test errors.
func serveArgs(t *testing.T, where string, args []string, flags map[string]bool) map[string]string {
	t.Helper()
	return commandArgs(t, where, "serve", args, flags)
}

// commandArgs is serveArgs for any fencegate command.
func commandArgs(t *testing.T, where, command string, args []string, flags map[string]bool) map[string]string {
	t.Helper()
	if len(args) == 0 || args[0] != command {
		t.Errorf("%s: got command line %q, want it to start with %s", where, args, command)
		return nil
	}
	got := map[string]string{}
	for _, a := range args[1:] {
		name, val, _ := strings.Cut(a, "=")
		if !strings.HasPrefix(name, "-") {
			t.Errorf("%s: argument %q: want only flags after %s", where, a, command)
			continue
		}
		name = strings.TrimLeft(name, "-")
		if !flags[name] {
			t.Errorf("%s: flag --%s: fencegate %s has no such flag", where, name, command)
		}
		got[name] = val
	}
	return got
}

// envFlag is the serve flag that environment variable name sets, if it is
// a FENCEGATE_ variable: FENCEGATE_POSTGRES_DSN sets --postgres-dsn.
func envFlag(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "FENCEGATE_")
	return strings.ToLower(strings.ReplaceAll(rest, "_", "-")), ok
}

// checkEnv checks that every FENCEGATE_ variable names a serve flag.
func checkEnv(t *testing.T, where string, vars []string, flags map[string]bool) {
	t.Helper()
	for _, v := range vars {
		f, ok := envFlag(v)
		if !ok {
			continue
		}
		if !flags[f] {
			t.Errorf("%s: %s: fencegate has no flag --%s for it", where, v, f)
		}
	}
}

// listenFlags are serve's flags that take a listen address.
var listenFlags = []string{"grpc-addr", "http-addr", "metrics-addr", "pg-listen-addr", "redis-listen-addr", "pprof-addr"}

func portOf(t *testing.T, where, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s: listen address %q: %v", where, addr, err)
	}
	return port
}
