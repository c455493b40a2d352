package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/fencegate/fencegate/cmd/internal/suggest"
	"github.com/fencegate/fencegate/election"
)

const fencesSummary = `List the fences fencegate knows (GET /v1/fences): each one's high-water
mark (the highest token its backend accepted), and its election's current
term and leader. With a policy, only the fences the caller may read
(fence.read) are listed.`

func runFences(ctx context.Context, g *globalConfig, args []string, stdout, stderr io.Writer) error {
	c := newCommand(g, "fences", "", fencesSummary)
	rest, err := c.parse(args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return c.usageError(stderr, "unexpected argument %q", rest[0])
	}
	gw, err := newGateway(g)
	if err != nil {
		return err
	}
	defer gw.close()
	fs, err := gw.listFences(ctx)
	if err != nil {
		return err
	}
	return printFences(stdout, g, fs)
}

const fenceSummary = `Show one fence (GET /v1/fences/NAME): its high-water mark, and its
election's current term and leader.`

const resetSummary = `Lower a fence's high-water mark (POST /v1/fences/NAME/reset): the way out
of a fence poisoned by a forged or mistaken high token under a term source
that cannot verify tokens (--term-sources NAME=monotonic). The backends'
marks are lowered to --to, and every fencegate replica watching etcd
forgets its terms and marks above it. Give the real leader's current token:
tokens from --to up are admitted again, lower ones stay refused. --to 0
forgets the fence. A mark at or above the current one changes nothing.
A fence fencegate does not know is an error (status 1), as a mistyped
name must not read as done. Needs the policy action fence.admin;
fencegate audits it.`

func runFence(ctx context.Context, g *globalConfig, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "reset" {
		return runFenceReset(ctx, g, args[1:], stdout, stderr)
	}
	c := newCommand(g, "fence get", "NAME", fenceSummary)
	if len(args) == 0 || args[0] != "get" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			_, err := c.parse(args, stdout, stderr)
			return err
		}
		msg := "want 'fence get NAME' or 'fence reset NAME --to N'"
		if len(args) > 0 {
			msg = fmt.Sprintf("unknown subcommand %q: %s%s", args[0], msg, suggest.Hint(args[0], []string{"get", "reset"}, "%q"))
		}
		fmt.Fprintf(stderr, "fencectl fence: %s\nRun 'fencectl fence get --help' or 'fencectl fence reset --help' for usage.\n", msg)
		return errUsage
	}
	rest, err := c.parse(args[1:], stdout, stderr)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return c.usageError(stderr, "want one fence name, got %d arguments", len(rest))
	}
	if err := checkFenceName(c, stderr, rest[0]); err != nil {
		return err
	}
	gw, err := newGateway(g)
	if err != nil {
		return err
	}
	defer gw.close()
	f, err := gw.getFence(ctx, rest[0])
	if err != nil {
		return err
	}
	if err := unknownFence(ctx, gw, f, ""); err != nil {
		return err
	}
	if g.WriteOut == "json" {
		return printJSON(stdout, f)
	}
	return printFences(stdout, g, []fence{f})
}

// unknownFence is the error for fence f when fencegate does not know it,
// as fences lists it (a backend holds its mark, or the election watch has
// seen its election), naming the known fences its name is close to; nil
// when it is known, and the list's error when it cannot be read. GET
// /v1/fences/NAME answers for any valid name, with zeros for one it does
// not know; a fence seen in its election but without a leader or a mark
// also reads as zeros, so only then is the list asked. after ends the
// message.
func unknownFence(ctx context.Context, gw *gateway, f fence, after string) error {
	if f.HighWater != 0 || f.Term != 0 || f.HasLeader || f.Leader != "" {
		return nil
	}
	all, err := gw.listFences(ctx)
	if err != nil {
		return err
	}
	names := make([]string, len(all))
	for i, g := range all {
		if g.Name == f.Name {
			return nil
		}
		names[i] = g.Name
	}
	return &notFoundError{fmt.Sprintf("fence %q not found: no backend holds a high-water mark for it and no election of that name is known (see 'fencectl fences')%s%s",
		f.Name, after, suggest.Hint(f.Name, names, "%q"))}
}

// checkFenceName is a usage error, before fencegate is asked, for a name
// that no fencegate takes as a fence's (election.ValidFenceName; its
// length is left to fencegate, whose limit is its own).
func checkFenceName(c *command, stderr io.Writer, name string) error {
	if election.ValidFenceName(name, len(name)) {
		return nil
	}
	return c.usageError(stderr, "fence name %.64q: want letters, digits, '.', '_' and '-', starting with a letter or digit", name)
}

// notFoundError is unknownFence's answer for a fence fencegate does not
// know.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

func runFenceReset(ctx context.Context, g *globalConfig, args []string, stdout, stderr io.Writer) error {
	c := newCommand(g, "fence reset", "NAME --to N", resetSummary)
	to := c.fs.String("to", "", "the high-water mark to lower the fence to: the real leader's current token (0 forgets the fence); required")
	rest, err := c.parse(args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return c.usageError(stderr, "want one fence name, got %d arguments", len(rest))
	}
	if err := checkFenceName(c, stderr, rest[0]); err != nil {
		return err
	}
	if *to == "" {
		return c.usageError(stderr, "--to is required: the real leader's current token (0 forgets the fence)")
	}
	mark, err := strconv.ParseUint(*to, 10, 64)
	if err != nil {
		return c.usageError(stderr, "--to %q: want a decimal integer from 0", *to)
	}
	gw, err := newGateway(g)
	if err != nil {
		return err
	}
	defer gw.close()
	res, err := gw.resetFence(ctx, rest[0], mark)
	if err != nil {
		return err
	}
	if g.WriteOut == "json" {
		return printJSON(stdout, struct {
			Fence           string `json:"fence"`
			HighWaterBefore uint64 `json:"highWaterBefore,string"`
			HighWater       uint64 `json:"highWater,string"`
			TermLowered     bool   `json:"termLowered"`
		}{res.GetFence(), res.GetHighWaterBefore(), res.GetHighWater(), res.GetTermLowered()})
	}
	if res.GetHighWaterBefore() == 0 && !res.GetTermLowered() {
		// Nothing was lowered: a name mistyped, most likely, when an
		// operator resets a fence under pressure. Only a caller who may
		// read the fence (fence.read) can be told; to any other, and
		// when fencegate cannot be asked, what the reset found is said.
		if f, err := gw.getFence(ctx, res.GetFence()); err == nil {
			var nf *notFoundError
			if err := unknownFence(ctx, gw, f, "; no high-water mark was lowered"); errors.As(err, &nf) {
				return err
			}
		}
	}
	switch before, after := res.GetHighWaterBefore(), res.GetHighWater(); {
	case before == 0:
		fmt.Fprintf(stdout, "fence %s: no high-water mark in any backend; nothing to lower\n", res.GetFence())
	case after >= before:
		fmt.Fprintf(stdout, "fence %s: high-water mark %d is not above %d: unchanged\n", res.GetFence(), before, mark)
	default:
		fmt.Fprintf(stdout, "fence %s: high-water mark lowered from %d to %d\n", res.GetFence(), before, after)
	}
	if res.GetTermLowered() {
		fmt.Fprintf(stdout, "fence %s: terms above %d forgotten (monotonic source)\n", res.GetFence(), mark)
	}
	return nil
}

func printFences(w io.Writer, g *globalConfig, fs []fence) error {
	if g.WriteOut == "json" {
		return printJSON(w, struct {
			Fences []fence `json:"fences"`
		}{fs})
	}
	rows := make([][]string, 0, len(fs))
	for _, f := range fs {
		rows = append(rows, []string{f.Name, num(f.HighWater), num(f.Term), orDash(f.Leader)})
	}
	return table(w, []string{"FENCE", "HIGH-WATER", "TERM", "LEADER"}, rows)
}
