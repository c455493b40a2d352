package main

import (
	"context"
	"io"
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

func runFence(ctx context.Context, g *globalConfig, args []string, stdout, stderr io.Writer) error {
	c := newCommand(g, "fence get", "NAME", fenceSummary)
	if len(args) == 0 || args[0] != "get" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			_, err := c.parse(args, stdout, stderr)
			return err
		}
		return c.usageError(stderr, "want 'fence get NAME'")
	}
	rest, err := c.parse(args[1:], stdout, stderr)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return c.usageError(stderr, "want one fence name, got %d arguments", len(rest))
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
	if g.WriteOut == "json" {
		return printJSON(stdout, f)
	}
	return printFences(stdout, g, []fence{f})
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
