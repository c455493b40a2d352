package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/tokens"
)

// Terms is the gateway's source of election terms; *election.Watcher
// implements it.
type Terms interface {
	tokens.TermSource
	// Terms returns every election known, sorted by name.
	Terms() []election.Term
}

// SQLBackend applies fenced SQL writes; *postgres.Backend implements it.
type SQLBackend interface {
	Exec(ctx context.Context, fence string, t tokens.Token, stmts []postgres.Statement) ([]postgres.Result, error)
	HighWater(ctx context.Context, fence string) (tokens.Token, bool, error)
	Fences(ctx context.Context) ([]postgres.Fence, error)
	Ping(ctx context.Context) error
}

// Options are the gateway's collaborators. Terms is required, and at least
// one backend.
type Options struct {
	Terms    Terms
	Postgres SQLBackend
	Logger   *slog.Logger
	// Registerer receives the gateway's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock for request durations; time.Now when nil.
	Now func() time.Time
}

// Gateway is the write pipeline. It is safe for concurrent use.
type Gateway struct {
	cfg     Config
	terms   Terms
	pg      SQLBackend
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time
	tracker tokens.Tracker
}

// ErrNotConfigured is returned for a write to a backend fencegate was not
// configured with.
var ErrNotConfigured = errors.New("proxy: backend not configured")

// New returns a gateway with cfg's limits.
func New(cfg Config, opts Options) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Terms == nil {
		return nil, errors.New("proxy: a term source is required")
	}
	if opts.Postgres == nil {
		return nil, errors.New("proxy: at least one backend is required")
	}
	g := &Gateway{cfg: cfg, terms: opts.Terms, pg: opts.Postgres, log: opts.Logger, now: opts.Now}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	if opts.Registerer != nil {
		g.metrics = NewMetrics(opts.Registerer, BackendPostgres)
		opts.Registerer.MustRegister(newStateCollector(g))
	}
	return g, nil
}

// Exec applies statements to PostgreSQL under fence with the raw token the
// client sent. It returns the parsed token and one result per statement, or
// a *tokens.RefusalError saying why nothing was applied.
func (g *Gateway) Exec(ctx context.Context, fence, rawToken string, stmts []postgres.Statement) (tokens.Token, []postgres.Result, error) {
	start := g.now()
	t, err := g.admit(ctx, fence, rawToken, len(stmts))
	if err == nil {
		err = g.validateSQL(fence, t, stmts)
	}
	var res []postgres.Result
	if err == nil {
		res, err = g.pg.Exec(ctx, fence, t, stmts)
		g.learn(fence, t, err)
	}
	g.finish(ctx, 0, fence, t, start, err)
	return t, res, err
}

// admit parses the token, checks the request's shape and decides on the
// token from memory, asking etcd when it is above everything known.
func (g *Gateway) admit(ctx context.Context, fence, rawToken string, n int) (tokens.Token, error) {
	t, err := tokens.Parse(rawToken)
	switch {
	case errors.Is(err, tokens.ErrMissing):
		return 0, tokens.Refuse(tokens.ReasonMissingToken, fence, 0, "a write needs a %s header (gRPC metadata %q)", tokens.Header, tokens.MetadataKey)
	case err != nil:
		return 0, tokens.Refuse(tokens.ReasonInvalidToken, fence, 0, "fencing token %.32q is not a decimal integer in [1, 2^64)", rawToken)
	}
	if !ValidFenceName(fence, g.cfg.MaxFenceName) {
		return t, tokens.Refuse(tokens.ReasonInvalidRequest, fence, t,
			"fence name %.64q: want 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", fence, g.cfg.MaxFenceName)
	}
	switch {
	case n == 0:
		return t, tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "a write needs at least one statement")
	case n > g.cfg.MaxStatements:
		return t, tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "%d statements, limit is %d", n, g.cfg.MaxStatements)
	}
	hw := g.tracker.HighWater(fence)
	term := g.terms.Term(fence)
	o := tokens.Decide(t, hw, term)
	if o == tokens.Verify {
		vctx, cancel := context.WithTimeout(ctx, g.cfg.VerifyTimeout)
		var held bool
		term, held, err = g.terms.Verify(vctx, fence, int64(t))
		cancel()
		if err != nil {
			r := tokens.Refuse(tokens.ReasonEtcdUnavailable, fence, t, "cannot verify term %d of election %q", t, fence)
			r.Err = err
			return t, r
		}
		o = tokens.DecideVerified(t, hw, term, held)
	}
	return t, g.refusal(o, fence, t, hw, term)
}

func (g *Gateway) refusal(o tokens.Outcome, fence string, t, hw tokens.Token, term election.Term) error {
	var r *tokens.RefusalError
	switch o {
	case tokens.Accept:
		return nil
	case tokens.Stale:
		if t < hw {
			r = tokens.Refuse(tokens.ReasonStaleToken, fence, t, "token %d is below the fence's high-water mark %d", t, hw)
		} else {
			r = tokens.Refuse(tokens.ReasonStaleToken, fence, t, "token %d is below the current term %d", t, term.Rev)
		}
	case tokens.Ended:
		r = tokens.Refuse(tokens.ReasonTermEnded, fence, t, "term %d of election %q is over and no leader holds it", t, fence)
	default:
		r = tokens.Refuse(tokens.ReasonUnknownTerm, fence, t, "no leader of election %q ever held term %d", fence, t)
	}
	r.HighWater = hw
	r.Term = tokens.Token(term.Rev)
	return r
}

func (g *Gateway) validateSQL(fence string, t tokens.Token, stmts []postgres.Statement) error {
	for i := range stmts {
		if n := len(stmts[i].Params); n > g.cfg.MaxParams {
			return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "statement %d has %d params, limit is %d", i, n, g.cfg.MaxParams)
		}
	}
	return nil
}

// learn folds a backend's answer into the in-memory high-water marks.
func (g *Gateway) learn(fence string, t tokens.Token, err error) {
	if err == nil {
		g.tracker.Raise(fence, t)
		return
	}
	if r, ok := tokens.AsRefusal(err); ok && r.Reason == tokens.ReasonStaleToken {
		g.tracker.Raise(fence, r.HighWater)
	}
}

func (g *Gateway) finish(ctx context.Context, backend int, fence string, t tokens.Token, start time.Time, err error) {
	var reason tokens.Reason
	if err != nil {
		r, ok := tokens.AsRefusal(err)
		if !ok {
			// Backends answer with refusals; anything else is a bug worth seeing.
			r = &tokens.RefusalError{Reason: tokens.ReasonBackendUnavailable, Fence: fence, Token: t, Err: err}
			g.log.ErrorContext(ctx, "unexpected backend error", "fence", fence, "token", uint64(t), "err", err)
		}
		reason = r.Reason
		g.log.LogAttrs(ctx, slog.LevelWarn, "write refused",
			slog.String("backend", backends[backend]),
			slog.String("fence", fence),
			slog.Uint64("token", uint64(t)),
			slog.String("reason", string(reason)),
			slog.Uint64("high_water", uint64(r.HighWater)),
			slog.Uint64("term", uint64(r.Term)),
			slog.String("err", err.Error()))
	}
	g.metrics.observe(backend, fence, reason, g.now().Sub(start).Seconds())
}

// FenceState is a fence as reported by GetFence and ListFences.
type FenceState struct {
	Name      string
	HighWater tokens.Token
	Term      election.Term
}

// Fence reports fence's high-water mark from the backend and its election's
// term as this replica knows it.
func (g *Gateway) Fence(ctx context.Context, name string) (FenceState, error) {
	if !ValidFenceName(name, g.cfg.MaxFenceName) {
		return FenceState{}, tokens.Refuse(tokens.ReasonInvalidRequest, name, 0, "invalid fence name %.64q", name)
	}
	hw, _, err := g.pg.HighWater(ctx, name)
	if err != nil {
		return FenceState{}, err
	}
	return FenceState{Name: name, HighWater: hw, Term: g.terms.Term(name)}, nil
}

// Fences reports every fence the backend stores or the election watch
// knows, sorted by name.
func (g *Gateway) Fences(ctx context.Context) ([]FenceState, error) {
	rows, err := g.pg.Fences(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(rows, func(a, b postgres.Fence) int { return strings.Compare(a.Name, b.Name) })
	terms := g.terms.Terms()
	out := make([]FenceState, 0, len(rows)+len(terms))
	// Both lists are sorted by name: merge them.
	i, j := 0, 0
	for i < len(rows) || j < len(terms) {
		switch {
		case j == len(terms) || (i < len(rows) && rows[i].Name < terms[j].Election):
			out = append(out, FenceState{Name: rows[i].Name, HighWater: rows[i].HighWater, Term: election.Term{Election: rows[i].Name}})
			i++
		case i == len(rows) || terms[j].Election < rows[i].Name:
			out = append(out, FenceState{Name: terms[j].Election, Term: terms[j]})
			j++
		default:
			out = append(out, FenceState{Name: rows[i].Name, HighWater: rows[i].HighWater, Term: terms[j]})
			i++
			j++
		}
	}
	return out, nil
}

// Ready reports whether every configured backend answers.
func (g *Gateway) Ready(ctx context.Context) error {
	if err := g.pg.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}
