// Command fencechaos is fencegate's safety campaign. It runs a real cluster
// on loopback (three etcd members, PostgreSQL or Redis, two fencegate
// replicas, leader-elected workers, all as separate processes), injects
// faults on a seeded random schedule, then checks the stored data against
// every worker's history: no stale write stored, no acknowledged write lost.
//
//	fencechaos --backend=postgres --mode=fenced --duration=60s
//	fencechaos --backend=redis --mode=control --seed=42
//
// In control mode the workers write straight to the backend, with no
// fence: the same schedule must then produce violations, which shows the
// campaign can fail. With --hostile=P a leading worker also attacks the
// fence from inside, before a write with probability P: SQL or Redis
// commands meant to move marks, split its transaction or poison the
// session, sent with its own valid token (hostile.go); each must be
// refused, and the backend's marks and state are checked at the end. By
// default (--secure) the replicas serve TLS, require client certificates
// and enforce a policy, as a deployment would (secure.go); hostile workers
// then also write as an intruder the policy does not allow and without a
// certificate. See docs/SAFETY.md.
//
// fencechaos re-executes itself for the etcd members (etcd-member) and the
// workers (worker); those subcommands are internal.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencegate/fencegate/cmd/internal/suggest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		return runCampaign(ctx, args)
	case "worker":
		err = runWorker(ctx, args)
	case "etcd-member":
		err = runEtcdMember(ctx, args)
	case "help":
		fmt.Println("usage: fencechaos [run] --backend=postgres|redis --mode=fenced|control [flags]; fencechaos run --help lists the flags")
		return 0
	default:
		// worker and etcd-member are internal: not offered.
		fmt.Fprintf(os.Stderr, "fencechaos: unknown command %q%s\nRun 'fencechaos help' for usage.\n", cmd, suggest.Hint(cmd, []string{"run", "help"}, "%q"))
		return 2
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "fencechaos %s: %v\n", cmd, err)
		return 1
	}
	return 0
}
