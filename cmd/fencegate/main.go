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
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/fencegate/fencegate/cmd/internal/suggest"
)

const usageText = `fencegate: a storage gateway that refuses writes from stale leaders.

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
	if code := exitStatus(err, os.Stderr); code != 0 {
		os.Exit(code)
	}
}

// holdSIGHUP catches SIGHUP for the rest of the process's life. serve
// reloads on it while serving; at any other moment (starting, draining,
// dev starting or removing its servers) Go's default action for it, which
// serve's own signal.Stop brings back, would kill the process: a routine
// logrotate or `systemctl reload` would abort a start or cut a drain
// short. The channel is never read: a SIGHUP serve does not take is
// dropped.
var holdSIGHUP = sync.OnceFunc(func() { signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP) })

// exitStatus is fencegate's exit status after run returned err, which it
// prints unless it was printed already: 2 for a mistake on the command
// line, 1 for anything else.
func exitStatus(err error, stderr io.Writer) int {
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "fencegate %s: %v\nRun 'fencegate %s --help' for usage.\n", ue.cmd, ue.err, ue.cmd)
		return 2
	default:
		fmt.Fprintln(stderr, "fencegate:", err)
		return 1
	}
}

// usageError is a mistake on the command line: an unknown flag or a bad
// value, a required flag missing, flags that do not go together, a stray
// argument. main prints it on one line, with where to read the command's
// usage, and exits 2, as for a flag the flag package refuses.
type usageError struct {
	cmd string // set by run
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usage makes err, when not nil, a usage error.
func usage(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err: err}
}

// usagef is a usage error with a message formatted as fmt.Errorf does.
func usagef(format string, a ...any) error { return &usageError{err: fmt.Errorf(format, a...)} }

// commands are the names `fencegate <command>` takes, for "did you mean".
var commands = []string{"serve", "dev", "migrate", "grant", "version", "help"}

// errUsage is returned after a usage message has been printed.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return errUsage
	}
	cmd, rest := args[0], args[1:]
	err := dispatch(ctx, cmd, rest, stdout, stderr)
	var ue *usageError
	if errors.As(err, &ue) && ue.cmd == "" {
		ue.cmd = cmd
	}
	return err
}

func dispatch(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	switch cmd {
	case "serve":
		return runServe(ctx, args, stdout, stderr)
	case "dev":
		return runDev(ctx, args, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, args, stdout, stderr)
	case "grant":
		return runGrant(ctx, args, stdout, stderr)
	case "version", "--version", "-version":
		if len(args) > 0 {
			return usagef("unexpected argument %q: version takes none", args[0])
		}
		fmt.Fprintln(stdout, versionLine())
		return nil
	case "help", "-h", "--help", "-help":
		// `fencegate help CMD` is `fencegate CMD --help`, as in git.
		if len(args) == 1 && args[0] != "help" && slices.Contains(commands, args[0]) {
			return dispatch(ctx, args[0], []string{"--help"}, stdout, stderr)
		}
		if len(args) > 0 && args[0] != "help" {
			return unknownCommand(stderr, args[0])
		}
		fmt.Fprint(stdout, usageText)
		return nil
	default:
		return unknownCommand(stderr, cmd)
	}
}

// unknownCommand prints that cmd is no command of fencegate's, and the one
// it was likely meant to be, and returns errUsage.
func unknownCommand(stderr io.Writer, cmd string) error {
	hint := suggest.Hint(cmd, commands, "%q")
	if strings.HasPrefix(cmd, "-") {
		hint = ": flags go after the command, as in 'fencegate serve --help'"
	}
	fmt.Fprintf(stderr, "fencegate: unknown command %q%s\nRun 'fencegate --help' for usage.\n", cmd, hint)
	return errUsage
}
