package deploy_test

import (
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
)

var helpFlag = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

var serveHelp struct {
	once  sync.Once
	flags map[string]bool
	err   error
}

// serveFlags is the set of flags `fencegate serve --help` lists, of the
// fencegate this tree builds.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := fencegateBinary(t)
	serveHelp.once.Do(func() {
		out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
		if err != nil {
			serveHelp.err = fmt.Errorf("fencegate serve --help: %v\n%s", err, out)
			return
		}
		serveHelp.flags = map[string]bool{}
		for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
			serveHelp.flags[m[1]] = true
		}
		if len(serveHelp.flags) < 10 || !serveHelp.flags["etcd-endpoints"] {
			serveHelp.err = fmt.Errorf("fencegate serve --help: got flags %v, want etcd-endpoints and the others", serveHelp.flags)
		}
	})
	if serveHelp.err != nil {
		t.Fatal(serveHelp.err)
	}
	return serveHelp.flags
}

// serveArgs is the flags of a `fencegate serve` command line, by name
// (values "" for a flag without one). Bad arguments are test errors.
func serveArgs(t *testing.T, where string, args []string, flags map[string]bool) map[string]string {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		t.Errorf("%s: got command line %q, want it to start with serve", where, args)
		return nil
	}
	got := map[string]string{}
	for _, a := range args[1:] {
		name, val, _ := strings.Cut(a, "=")
		if !strings.HasPrefix(name, "-") {
			t.Errorf("%s: argument %q: want only flags after serve", where, a)
			continue
		}
		name = strings.TrimLeft(name, "-")
		if !flags[name] {
			t.Errorf("%s: flag --%s: fencegate serve has no such flag", where, name)
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
			t.Errorf("%s: %s: fencegate serve has no flag --%s for it", where, v, f)
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
