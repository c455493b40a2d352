// Command fencectl is fencegate's operator and worker CLI, in the manner of
// etcdctl: it lists fences and elections, follows term changes, and runs a
// command as the leader of an election (`fencectl run`), killing it before
// its lease can have expired when the leadership is lost.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const usageHead = `fencectl: look at fencegate's fences and elections; run a command as a leader.

Usage:
  fencectl [global flags] <command> [flags] [args]

Commands:
  fences          list the fences fencegate knows (GET /v1/fences)
  fence get NAME  one fence: high-water mark, term, leader (GET /v1/fences/NAME)
  fence reset NAME --to N
                  lower a poisoned fence's high-water mark (fence.admin)
  status          fencegate's health and readiness, etcd, every election's leader and term
  watch           print term changes as etcd reports them (and refusals, from fencegate's metrics)
  run             campaign in an election and run a command while leader
  version         print the version and exit

Global flags, before or after the command (each also read from
FENCECTL_<FLAG>, e.g. FENCECTL_ENDPOINT):
`

// usage is the top-level help: usageHead and the global flags.
func usage() string {
	var b strings.Builder
	b.WriteString(usageHead)
	fs := flag.NewFlagSet("fencectl", flag.ContinueOnError)
	fs.SetOutput(&b)
	g := defaultGlobalConfig()
	g.register(fs)
	fs.PrintDefaults()
	b.WriteString("\nRun 'fencectl <command> --help' for a command's flags.\n")
	return b.String()
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var exit *exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case errors.As(err, &exit):
		if exit.msg != "" {
			fmt.Fprintln(os.Stderr, "fencectl:", exit.msg)
		}
		os.Exit(exit.code)
	default:
		fmt.Fprintln(os.Stderr, "fencectl:", err)
		os.Exit(1)
	}
}

// errUsage is returned after a usage message has been printed.
var errUsage = errors.New("usage")

// exitError ends fencectl with a given status, e.g. that of `run`'s
// command, after printing msg (if any).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d: %s", e.code, e.msg) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	g := defaultGlobalConfig()
	rest, err := g.parseLeading(args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage())
		return errUsage
	}
	switch cmd, rest := rest[0], rest[1:]; cmd {
	case "fences":
		return runFences(ctx, g, rest, stdout, stderr)
	case "fence":
		return runFence(ctx, g, rest, stdout, stderr)
	case "status":
		return runStatus(ctx, g, rest, stdout, stderr)
	case "watch":
		return runWatch(ctx, g, rest, stdout, stderr)
	case "run":
		return runRun(ctx, g, rest, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionLine())
		return nil
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage())
		return nil
	default:
		fmt.Fprintf(stderr, "fencectl: unknown command %q\n\n%s", cmd, usage())
		return errUsage
	}
}
