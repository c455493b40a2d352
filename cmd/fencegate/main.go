// Command fencegate is the fencing-token enforcing storage gateway: workers
// elected in etcd write to PostgreSQL (and Redis) through it, and it refuses
// writes from stale, ended and forged terms. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

const usage = `fencegate: a storage gateway that refuses writes from stale leaders.

Usage:
  fencegate <command> [flags]

Commands:
  serve     serve the gateway against etcd and PostgreSQL and/or Redis
  dev       serve on embedded defaults: embedded etcd, throwaway PostgreSQL and Redis
  migrate   apply fencegate's schema to PostgreSQL and exit
  grant     let fencegate's PostgreSQL login run statements as a role and exit
  version   print the version and exit

Run 'fencegate <command> --help' for a command's flags.
`

func main() {
	// The live heap is small (a few MiB) and the garbage is per request, so
	// the default GOGC=100 collects many times a second under load. 200
	// halves that GC work for a few MiB of heap. GOGC in the environment
	// still wins.
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(200)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "fencegate:", err)
		os.Exit(1)
	}
}

// errUsage is returned after a usage message has been printed.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		return runServe(ctx, rest, stdout, stderr)
	case "dev":
		return runDev(ctx, rest, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, rest, stdout, stderr)
	case "grant":
		return runGrant(ctx, rest, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionLine())
		return nil
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprintf(stderr, "fencegate: unknown command %q\n\n%s", cmd, usage)
		return errUsage
	}
}
