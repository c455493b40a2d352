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
	"slices"
	"strings"

	"github.com/fencegate/fencegate/cmd/internal/suggest"
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
	ctx, stop := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	notify(sigs, stopSignals...)
	go func() {
		<-sigs
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if code := exitStatus(err, os.Stderr); code != 0 {
		os.Exit(code)
	}
}

// exitStatus is fencectl's exit status after run returned err, which it
// prints unless it was printed already: 2 for a usage error (printed by
// run), an exitError's code, else 1.
func exitStatus(err error, stderr io.Writer) int {
	var exit *exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &exit):
		if exit.msg != "" {
			fmt.Fprintln(stderr, "fencectl:", exit.msg)
		}
		return exit.code
	default:
		fmt.Fprintln(stderr, "fencectl:", err)
		return 1
	}
}

// commands are the names `fencectl <command>` takes, for "did you mean".
var commands = []string{"fences", "fence", "status", "watch", "run", "version", "help"}

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
		return runVersion(g, rest, stdout, stderr)
	case "help", "-h", "--help", "-help":
		// `fencectl help CMD` is `fencectl CMD --help`, as in git.
		if len(rest) == 1 && rest[0] != "help" && slices.Contains(commands, rest[0]) {
			return run(ctx, []string{rest[0], "--help"}, stdout, stderr)
		}
		if len(rest) == 1 && rest[0] == "help" {
			rest = nil
		}
		if len(rest) > 0 {
			return unknownCommand(stderr, rest[0])
		}
		fmt.Fprint(stdout, usage())
		return nil
	default:
		return unknownCommand(stderr, cmd)
	}
}

// unknownCommand prints that cmd is no command of fencectl's, and the one
// it was likely meant to be, and returns errUsage.
func unknownCommand(stderr io.Writer, cmd string) error {
	fmt.Fprintf(stderr, "fencectl: unknown command %q%s\nRun 'fencectl --help' for usage.\n", cmd, suggest.Hint(cmd, commands, "%q"))
	return errUsage
}
