package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// TestRedTeam25LeaderValueInjectsIntoOperatorTerminal
//
// Attack: a worker that may campaign (it has write access to its election
// under the prefix, nothing more) campaigns with a value holding terminal
// control bytes and a newline: "w1" + ESC[2K (erase line) + ESC]0;…BEL (set
// the window title) + "\n" + a forged table row for another election
// ("payments  worker-7  3  1  -"). An operator then runs `fencectl status`
// (or `fences`, `watch`) to see who leads what, e.g. to pick the "real
// leader's current token" that `fencectl fence reset --to` asks for.
//
// What happened (on this code): fencectl prints election names and leader
// values from etcd (status, watch) and from fencegate (fences) as they
// are, through text/tabwriter, which passes control bytes on and starts a
// new row at the newline: the operator's terminal executes the escape
// sequences and shows a row for election "payments", led by "worker-7" in
// term 3, that does not exist. A reset of payments to 3 would re-admit
// every zombie above it; other sequences rewrite or hide what was printed
// before.
//
// What should happen: values that came from etcd or fencegate are printed
// escaped (strconv.Quote-style, or control bytes replaced) in the table
// forms; -w json is already safe.
//
// Severity: low to medium (spoofing the operator's view of leadership from
// a worker's campaign value; no write by itself).
func TestRedTeam25LeaderValueInjectsIntoOperatorTerminal(t *testing.T) {
	c := newClient(t)
	prefix := testPrefix(t)
	s, err := concurrency.NewSession(c, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e := concurrency.NewElection(s, prefix+"/jobs")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	forged := "w1\x1b[2K\x1b]0;owned\x07\npayments  worker-7  3  1  -"
	if err := e.Campaign(ctx, forged); err != nil {
		t.Fatal(err)
	}

	p := startFencectl(t, nil, "status", "--etcd-endpoints", etcdURL, "--election-prefix", prefix,
		"--endpoint", "http://127.0.0.1:1", "--command-timeout", "2s")
	p.wait(t)
	out := p.out.String()
	if !strings.Contains(out, "jobs") {
		t.Fatalf("status did not list the election at all:\n%q", out)
	}
	if strings.ContainsRune(out, '\x1b') || strings.ContainsRune(out, '\x07') {
		t.Errorf("fencectl status wrote a campaign value's terminal escape sequences to the operator's terminal as they are:\n%q", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "payments") {
			t.Errorf("a campaign value's newline forged a table row for an election that does not exist: %q\nwhole output:\n%q", line, out)
		}
	}
}
