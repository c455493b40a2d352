package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/tokens"
)

// ResetResult is what a fence reset changed.
type ResetResult struct {
	// Before is the highest mark the backends held; After the mark now.
	Before, After tokens.Token
	// TermLowered says the fence's term source forgot the terms above
	// After (a monotonic source); sources that see their elections keep
	// theirs.
	TermLowered bool
	// Reset are the backends reset (BackendPostgres, BackendRedis), in
	// order. With an error, the backends reset before it: their marks
	// are After, the others' unknown.
	Reset []string
}

// Publisher tells the other replicas of a fence reset, so they lower what
// they remember of the fence too. election.Resets is one.
type Publisher interface {
	PublishReset(ctx context.Context, fence string, mark int64) error
}

// ResetFence lowers fence's high-water mark to mark in every backend (0
// forgets the fence), and what this replica remembers of it: its marks and,
// for a source that only knows the tokens it was shown, its term. It is the
// way out of a poisoned fence (a forged or mistaken high token accepted
// under a monotonic source), an operator's action: the policy must allow
// the caller fence.admin, and the reset is audited and logged. A mark at or
// above the current one changes nothing. Lowering a mark re-admits tokens
// down to it: reset to the real leader's current token, not below.
func (g *Gateway) ResetFence(ctx context.Context, fence string, mark tokens.Token) (ResetResult, error) {
	start := g.now()
	var res ResetResult
	gr, err := g.authorize(ctx, policy.ActionFenceAdmin, fence)
	if err == nil && !ValidFenceName(fence, g.cfg.MaxFenceName) {
		err = tokens.Refuse(tokens.ReasonInvalidRequest, fence, 0, "invalid fence name %.64q", fence)
	}
	if err == nil && mark > tokens.MaxTerm {
		err = tokens.Refuse(tokens.ReasonInvalidRequest, fence, 0, "high-water mark %d is beyond every term", mark)
	}
	if err == nil {
		res, err = g.reset(ctx, fence, mark)
	}
	if err == nil && g.resets != nil {
		// The backends are reset; the other replicas only remember.
		if perr := g.resets.PublishReset(ctx, fence, int64(mark)); perr != nil {
			g.log.WarnContext(ctx, "fence reset not published to the other replicas: restart them or reset the fence on each",
				"fence", fence, "err", perr)
		}
	}
	// A partial reset: err, and the backends in res.Reset lowered to
	// res.After (res.Before and res.After are 0 when none was).
	partly := err != nil && len(res.Reset) > 0
	if g.audit != nil {
		rec := g.auditRecord(ctx, policy.ActionFenceAdmin, -1, fence, 0, election.Term{}, res.Before, gr, start, err)
		rec.HighWaterAfter = uint64(res.After)
		if partly {
			// Say where, as "(outcome unknown)" says what is not known.
			rec.Outcome += " (reset in " + strings.Join(res.Reset, ", ") + " only)"
		}
		g.audit.Write(rec)
	}
	if partly {
		g.log.WarnContext(ctx, "fence reset incomplete: run it again when the backend answers",
			"fence", fence, "lowered_in", strings.Join(res.Reset, ","), "high_water_before", uint64(res.Before),
			"high_water_after", uint64(res.After), "err", err, "principal", principalOf(ctx))
	}
	if err != nil {
		g.countRead(fence, err)
		return res, err
	}
	g.log.LogAttrs(ctx, slog.LevelWarn, "fence reset",
		slog.String("fence", fence), slog.Uint64("high_water_before", uint64(res.Before)),
		slog.Uint64("high_water_after", uint64(res.After)), slog.Bool("term_lowered", res.TermLowered),
		slog.String("principal", principalOf(ctx)))
	return res, nil
}

func (g *Gateway) reset(ctx context.Context, fence string, mark tokens.Token) (ResetResult, error) {
	var res ResetResult
	type resetter interface {
		Reset(ctx context.Context, fence string, mark tokens.Token) (tokens.Token, error)
	}
	for _, be := range []struct {
		id string
		b  resetter
	}{{BackendPostgres, g.pg}, {BackendRedis, g.rd}} {
		if be.b == nil {
			continue
		}
		before, err := be.b.Reset(ctx, fence, mark)
		if err != nil {
			// The backends are reset one after the other: say which are
			// done, so the operator knows the state and runs it again.
			// Err is appended to Msg when the refusal is printed.
			res.After = min(res.Before, mark)
			msg := "cannot reset the fence in " + backendName(be.id)
			if len(res.Reset) > 0 {
				done := make([]string, len(res.Reset))
				for i, id := range res.Reset {
					done[i] = backendName(id)
				}
				msg += fmt.Sprintf(" (the mark in %s is already lowered to %d, from %d: run the reset again when %s answers)",
					strings.Join(done, " and "), res.After, res.Before, backendName(be.id))
			}
			return res, &tokens.RefusalError{Reason: tokens.ReasonBackendUnavailable, Fence: fence, Err: err, Msg: msg}
		}
		res.Before = max(res.Before, before)
		res.Reset = append(res.Reset, be.id)
	}
	res.After = min(res.Before, mark)
	res.TermLowered = g.LowerLocal(fence, mark)
	return res, nil
}

// backendName is how messages to people name backend id.
func backendName(id string) string {
	if id == BackendPostgres {
		return "PostgreSQL"
	}
	return "Redis"
}

// LowerLocal lowers what this replica remembers of fence to mark: its
// marks, and its term when the source only knows the tokens it was shown.
// A replica calls it when another resets the fence; the backends are
// already reset. It reports whether the term was lowered.
func (g *Gateway) LowerLocal(fence string, mark tokens.Token) bool {
	for i := range g.trackers {
		g.trackers[i].Lower(fence, mark)
	}
	if l, ok := g.terms.(interface{ Lower(string, int64) bool }); ok {
		return l.Lower(fence, int64(mark))
	}
	return false
}

func principalOf(ctx context.Context) string {
	if c := policy.CallerFrom(ctx); c != nil {
		return c.Principal
	}
	return ""
}
