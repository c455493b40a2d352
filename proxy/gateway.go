package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy/audit"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/proxy/redis"
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
	// ExecAs runs the statements with the privileges of role, or of
	// fencegate's own login when role is empty.
	ExecAs(ctx context.Context, fence string, t tokens.Token, role string, stmts []postgres.Statement) ([]postgres.Result, error)
	HighWater(ctx context.Context, fence string) (tokens.Token, bool, error)
	// Reset lowers the fence's mark (0 forgets it) and returns the old one.
	Reset(ctx context.Context, fence string, mark tokens.Token) (tokens.Token, error)
	Fences(ctx context.Context) ([]postgres.Fence, error)
	Ping(ctx context.Context) error
}

// RedisBackend applies fenced Redis writes; *redis.Backend implements it.
type RedisBackend interface {
	Exec(ctx context.Context, fence string, t tokens.Token, cmds [][]string) ([]any, error)
	HighWater(ctx context.Context, fence string) (tokens.Token, bool, error)
	// Reset lowers the fence's mark (0 forgets it) and returns the old one.
	Reset(ctx context.Context, fence string, mark tokens.Token) (tokens.Token, error)
	Fences(ctx context.Context) ([]redis.Fence, error)
	Ping(ctx context.Context) error
}

// Authorizer is the policy: what a principal may do to a fence.
// *policy.Store implements it.
type Authorizer interface {
	Decide(principal, fence string, a policy.Action) policy.Decision
}

// policySource is an Authorizer whose policy can change while a
// transaction is open (*policy.Store): Policy returns the policy in force,
// a new value after each reload. An Authorizer without it is taken to
// decide the same way for ever.
type policySource interface {
	Policy() *policy.Policy
}

// AuditLog records decisions; *audit.Log implements it.
type AuditLog interface {
	Write(r *audit.Record)
}

// Options are the gateway's collaborators. Terms is required, and at least
// one backend.
type Options struct {
	Terms    Terms
	Postgres SQLBackend
	Redis    RedisBackend
	// RedisRefuses, when set, names why Redis writes to a fence are
	// refused ("" lets them through): a fence whose term source checks
	// terms only inside PostgreSQL (postgres-term) has no check Redis
	// could run in the write. Refused with INVALID_REQUEST.
	RedisRefuses func(fence string) string
	// Policy, when set, is consulted for every request: anything it does
	// not allow is refused with NOT_AUTHORIZED (or only logged, with
	// Config.PolicyShadow). If it also has a method Policy() *policy.Policy
	// (a *policy.Store), an open transaction (Admission) is decided again
	// once that value changes.
	Policy Authorizer
	// AuthRequired refuses callers the transport could not identify
	// (no verified client certificate or bearer token) with UNAUTHENTICATED.
	AuthRequired bool
	// Audit, when set, gets one record per write decision and per refused
	// read.
	Audit  AuditLog
	Logger *slog.Logger
	// Registerer receives the gateway's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock for request durations; time.Now when nil.
	Now func() time.Time
	// Protocol tells, for logs and audit records, the protocol a request
	// came in by from its context when the front did not say
	// (WithProtocol); nil leaves it unnamed.
	Protocol func(context.Context) string
	// Resets, when set, tells the other replicas of a fence reset.
	Resets Publisher
	// ReadBeforeUse tells whether a write to fence through backend
	// (BackendPostgres, BackendRedis) must have its term read from the
	// source (Terms.Verify) just before it is sent: fences whose source
	// the backend cannot check atomically with the write (a Redis lease
	// kept apart from the data). Such reads are not rate limited (the
	// verify limiter is for tokens above every known term); a token
	// memory already refuses is refused without one. Nil: none.
	ReadBeforeUse func(backend, fence string) bool
}

// Gateway is the write pipeline. It is safe for concurrent use.
type Gateway struct {
	cfg   Config
	terms Terms
	pg    SQLBackend
	rd    RedisBackend
	// redisRefuses is Options.RedisRefuses.
	redisRefuses func(fence string) string
	log          *slog.Logger
	metrics      *Metrics
	now          func() time.Time
	// trackers holds each backend's marks apart: what one backend reports
	// never refuses writes to the other.
	trackers [len(backends)]tokens.Tracker
	verifies *verifyLimiter
	// inflight counts each backend's writes between admission and answer.
	inflight [len(backends)]atomic.Int64
	// reading counts each backend's writes waiting for the etcd read of
	// their term that admit makes before use (readFirst), bounded by
	// MaxInFlight as the writes after them are.
	reading [len(backends)]atomic.Int64

	policy Authorizer
	// policyNow is the policy in force when Policy can change
	// (policySource); nil otherwise.
	policyNow func() *policy.Policy
	authReq   bool
	audit     AuditLog
	// auditSeq numbers the audit records' request ids.
	auditSeq atomic.Uint64
	auditID  string
	// refusals rate-limits the log lines of identical refusals.
	refusals refusalLog
	protocol func(context.Context) string
	resets   Publisher
	// readFirst is Options.ReadBeforeUse.
	readFirst func(backend, fence string) bool
	// fresh, when the term source can tell (election.Freshness), says
	// whether a fence's term in memory follows the source.
	fresh func(fence string) bool
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
	// A typed nil in an interface is not a backend.
	if opts.Postgres == nil && opts.Redis == nil {
		return nil, errors.New("proxy: at least one backend is required")
	}
	g := &Gateway{
		cfg: cfg, terms: opts.Terms, pg: opts.Postgres, rd: opts.Redis, redisRefuses: opts.RedisRefuses, log: opts.Logger, now: opts.Now,
		policy: opts.Policy, authReq: opts.AuthRequired, audit: opts.Audit, protocol: opts.Protocol, resets: opts.Resets,
		readFirst: opts.ReadBeforeUse,
		verifies:  newVerifyLimiter(cfg.VerifyRate, cfg.VerifyBurst, cfg.VerifyFences),
	}
	if f, ok := opts.Terms.(election.Freshness); ok {
		g.fresh = f.Fresh
	}
	g.checkSends()
	if ps, ok := opts.Policy.(policySource); ok {
		g.policyNow = ps.Policy
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.audit != nil {
		// Request ids unique across replicas and restarts: a random
		// prefix, then a counter.
		var b [6]byte
		_, _ = rand.Read(b[:])
		g.auditID = hex.EncodeToString(b[:]) + "-"
	}
	if opts.Registerer != nil {
		var enabled []string
		if g.pg != nil {
			enabled = append(enabled, BackendPostgres)
		}
		if g.rd != nil {
			enabled = append(enabled, BackendRedis)
		}
		g.metrics = NewMetrics(opts.Registerer, enabled...)
		opts.Registerer.MustRegister(newStateCollector(g))
	}
	return g, nil
}

// Exec applies statements to PostgreSQL under fence with the raw token the
// client sent. It returns the parsed token and one result per statement, or
// a *tokens.RefusalError saying why nothing was applied.
func (g *Gateway) Exec(ctx context.Context, fence, rawToken string, stmts []postgres.Statement) (tokens.Token, []postgres.Result, error) {
	if g.pg == nil {
		return 0, nil, fmt.Errorf("%w: PostgreSQL (start fencegate with --postgres-dsn)", ErrNotConfigured)
	}
	start := g.now()
	var (
		t    tokens.Token
		term election.Term
		res  []postgres.Result
	)
	gr, err := g.authorize(ctx, policy.ActionSQLWrite, fence)
	hw := g.auditHighWater(backendPostgres, fence)
	if err == nil {
		t, term, err = g.admit(ctx, backendPostgres, fence, rawToken, len(stmts), start)
	} else {
		t = tokenOf(err, rawToken)
	}
	if err == nil {
		err = g.validateSQL(fence, t, stmts)
	}
	if err == nil {
		err = g.enter(backendPostgres, fence, t)
	}
	if err == nil {
		res, err = g.pg.ExecAs(ctx, fence, t, gr.role, stmts)
		g.inflight[backendPostgres].Add(-1)
		g.learn(ctx, backendPostgres, fence, t, term, err)
	}
	g.finish(ctx, backendPostgres, fence, t, start, time.Time{}, err)
	if g.audit != nil {
		rec := g.auditRecord(ctx, policy.ActionSQLWrite, backendPostgres, fence, t, term, hw, gr, start, err)
		sqls := make([]string, len(stmts))
		for i := range stmts {
			sqls[i] = stmts[i].SQL
		}
		rec.Statements = audit.Fingerprint(sqls...)
		for i := range res {
			rec.Rows += res[i].RowsAffected
		}
		g.audit.Write(rec)
	}
	return t, res, err
}

// Redis applies commands to Redis under fence with the raw token the client
// sent. It returns the parsed token and one reply per command, or a
// *tokens.RefusalError saying why nothing was applied.
func (g *Gateway) Redis(ctx context.Context, fence, rawToken string, cmds [][]string) (tokens.Token, []any, error) {
	return g.RedisBatch(ctx, fence, rawToken, cmds, nil)
}

// RedisBatch is Redis for a front that runs the parts of a pipelined
// batch again when the batch is refused because of one command, nothing
// applied (the RESP listener answers each command as Redis would): a
// refusal split(err, len(cmds)) says it will split is neither counted nor
// audited here, as the parts are when they run. split is a plain function,
// not a closure, so that the call allocates nothing.
func (g *Gateway) RedisBatch(ctx context.Context, fence, rawToken string, cmds [][]string, split func(error, int) bool) (tokens.Token, []any, error) {
	if g.rd == nil {
		return 0, nil, fmt.Errorf("%w: Redis (start fencegate with --redis-addr)", ErrNotConfigured)
	}
	start := g.now()
	var (
		t    tokens.Token
		term election.Term
		res  []any
	)
	gr, err := g.authorize(ctx, policy.ActionRedisWrite, fence)
	hw := g.auditHighWater(backendRedis, fence)
	if err == nil && g.redisRefuses != nil {
		if why := g.redisRefuses(fence); why != "" {
			t = tokenOf(nil, rawToken)
			err = tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "%s", why)
		}
	}
	if err == nil {
		t, term, err = g.admit(ctx, backendRedis, fence, rawToken, len(cmds), start)
	} else {
		t = tokenOf(err, rawToken)
	}
	if err == nil {
		err = g.enter(backendRedis, fence, t)
	}
	if err == nil {
		res, err = g.rd.Exec(ctx, fence, t, cmds)
		g.inflight[backendRedis].Add(-1)
		g.learn(ctx, backendRedis, fence, t, term, err)
	}
	if err != nil && split != nil && split(err, len(cmds)) {
		return t, res, err
	}
	g.finish(ctx, backendRedis, fence, t, start, time.Time{}, err)
	if g.audit != nil {
		rec := g.auditRecord(ctx, policy.ActionRedisWrite, backendRedis, fence, t, term, hw, gr, start, err)
		// Command names only: keys and values are data.
		names := make([]string, len(cmds))
		for i, c := range cmds {
			if len(c) > 0 {
				names[i] = strings.ToUpper(c[0])
			}
		}
		rec.Statements = audit.Fingerprint(names...)
		g.audit.Write(rec)
	}
	return t, res, err
}

// RefuseRequest refuses a write of action a (sql.write or redis.write)
// that its transport could not turn into statements or commands: a
// message over the size limit, a parameter a JSON number cannot carry
// exactly, an argument of a kind Redis has no form for. problem says
// what is wrong; its reason is INVALID_REQUEST, unless a refusal of the
// caller comes first: the caller is authenticated and authorized before
// being told what is wrong with its request, as for any write. The
// refusal is then counted, logged and audited as Exec and Redis do
// theirs, and returned to be sent. Nothing reaches a backend.
func (g *Gateway) RefuseRequest(ctx context.Context, a policy.Action, fence, rawToken string, problem *tokens.RefusalError) error {
	backend := backendPostgres
	switch {
	case a == policy.ActionRedisWrite && g.rd == nil:
		return fmt.Errorf("%w: Redis (start fencegate with --redis-addr)", ErrNotConfigured)
	case a == policy.ActionRedisWrite:
		backend = backendRedis
	case g.pg == nil:
		return fmt.Errorf("%w: PostgreSQL (start fencegate with --postgres-dsn)", ErrNotConfigured)
	}
	start := g.now()
	gr, err := g.authorize(ctx, a, fence)
	hw := g.auditHighWater(backend, fence)
	if err == nil {
		err = problem
	}
	t := tokenOf(err, rawToken)
	g.finish(ctx, backend, fence, t, start, time.Time{}, err)
	if g.audit != nil {
		g.audit.Write(g.auditRecord(ctx, a, backend, fence, t, election.Term{}, hw, gr, start, err))
	}
	return err
}

// RefusedLogin records a listener's refusal of a login (the PostgreSQL
// listener's startup, the RESP listener's AUTH or HELLO) whose fence or
// token is malformed or missing, which the listeners read at login rather
// than at a write: counted, logged and audited as a refused write of fence
// (action a) would be, with the identity the connection has so far (a
// client certificate's), and not authorized: the login it would be
// authorized as was never tried. A worker that cannot connect shows in the
// metrics and the log, not only in its own output.
func (g *Gateway) RefusedLogin(ctx context.Context, a policy.Action, fence, rawToken string, problem *tokens.RefusalError) {
	backend := backendPostgres
	if a == policy.ActionRedisWrite {
		backend = backendRedis
	}
	start := g.now()
	t := tokenOf(problem, rawToken)
	g.finish(ctx, backend, fence, t, start, time.Time{}, problem)
	if g.audit != nil {
		g.audit.Write(g.auditRecord(ctx, a, backend, fence, t, election.Term{}, 0, grant{}, start, problem))
	}
}

// Anonymous reports whether the gateway serves callers with no identity
// (no AuthRequired): with no policy, or a policy rule that matches any
// principal, whoever reaches its listeners may write, so their address is
// its boundary.
func (g *Gateway) Anonymous() bool { return !g.authReq }

// Authenticated says whether the caller of ctx has the identity the
// gateway requires (AuthRequired): nil, or the UNAUTHENTICATED refusal
// each of its writes to fence would get. A listener asks it at login, so
// that a caller every write of which would be refused does not stay
// logged in.
func (g *Gateway) Authenticated(ctx context.Context, fence string) error {
	_, err := g.authenticate(ctx, fence)
	return err
}

// authenticate returns the caller's principal, or the UNAUTHENTICATED
// refusal when it has none and one is required.
func (g *Gateway) authenticate(ctx context.Context, fence string) (string, error) {
	var principal string
	c := policy.CallerFrom(ctx)
	if c != nil {
		principal = c.Principal
	}
	if principal == "" && g.authReq {
		why := "no verified client certificate or bearer token"
		if c != nil && c.AuthError != "" {
			why = c.AuthError
		}
		return "", tokens.Refuse(tokens.ReasonUnauthenticated, fence, 0, "%s", why)
	}
	return principal, nil
}

// authorize decides whether the caller the transport attached to ctx may
// do a to fence, and returns the PostgreSQL role the policy runs its
// statements as. It is the one authorization of every way in.
func (g *Gateway) authorize(ctx context.Context, a policy.Action, fence string) (grant, error) {
	if g.policy == nil && !g.authReq {
		return grant{}, nil
	}
	principal, err := g.authenticate(ctx, fence)
	if err != nil {
		return grant{}, err
	}
	if g.policy == nil {
		return grant{}, nil
	}
	d := g.policy.Decide(principal, fence, a)
	if d.Allowed {
		return grant{role: d.Role}, nil
	}
	return g.denied(ctx, principal, a, fence, d)
}

// denied is authorize's answer to a caller the policy refuses: in shadow
// mode a grant marked shadow, counted and logged; otherwise the
// NOT_AUTHORIZED refusal.
func (g *Gateway) denied(ctx context.Context, principal string, a policy.Action, fence string, d policy.Decision) (grant, error) {
	who := "anonymous caller"
	if principal != "" {
		who = strconv.Quote(principal)
	}
	shown := g.shownFence(fence)
	if g.cfg.PolicyShadow {
		g.metrics.shadowDenied(a)
		if log, suppressed := g.refusals.admit(refusalKey{-1, shown, tokens.Reason(a), 0}, g.now()); log {
			g.log.LogAttrs(ctx, slog.LevelWarn, "policy would refuse (shadow mode): allowed",
				slog.String("principal", principal), slog.String("action", string(a)), slog.String("fence", shown),
				slog.String("rule", d.Rule), slog.Uint64("identical_not_logged", suppressed))
		}
		return grant{shadow: true}, nil
	}
	r := tokens.Refuse(tokens.ReasonNotAuthorized, fence, 0, "%s may not %s fence %q", who, a, shown)
	if d.Rule != "" {
		r.Msg += " (rule " + strconv.Quote(d.Rule) + ")"
	}
	r.Metadata = map[string]string{"principal": principal, "action": string(a)}
	return grant{}, r
}

// tokenOf is the token a request refused before its token was looked at
// (UNAUTHENTICATED, NOT_AUTHORIZED) carried, if it parses: the refusal,
// the log line and the audit record name it.
func tokenOf(err error, rawToken string) tokens.Token {
	t, perr := tokens.Parse(rawToken)
	if perr != nil {
		return 0
	}
	if r, ok := tokens.AsRefusal(err); ok {
		r.Token = t
	}
	return t
}

// grant is what authorize allowed: the role statements run as, and
// whether only shadow mode let the request through.
type grant struct {
	role   string
	shadow bool
}

// auditHighWater is the fence's high-water mark as this replica knows it
// before a write, for the audit record.
func (g *Gateway) auditHighWater(backend int, fence string) tokens.Token {
	if g.audit == nil {
		return 0
	}
	return g.trackers[backend].HighWater(fence)
}

// auditRecord describes one decision. backend -1 is a read.
func (g *Gateway) auditRecord(ctx context.Context, a policy.Action, backend int, fence string, t tokens.Token,
	term election.Term, hw tokens.Token, gr grant, start time.Time, err error,
) *audit.Record {
	rec := &audit.Record{
		Time:            start,
		RequestID:       g.auditID + strconv.FormatUint(g.auditSeq.Add(1), 10),
		Action:          string(a),
		Fence:           fence,
		Token:           uint64(t),
		Term:            uint64(term.Rev),
		HighWaterBefore: uint64(hw),
		HighWaterAfter:  uint64(hw),
		Role:            gr.role,
		Outcome:         "accepted",
		Shadow:          gr.shadow,
		Protocol:        g.protocolOf(ctx),
	}
	if backend >= 0 {
		rec.Backend = backends[backend]
	}
	if c := policy.CallerFrom(ctx); c != nil {
		rec.Principal = c.Principal
		if c.Peer != nil {
			rec.Peer = c.Peer.String()
		}
	}
	if err != nil {
		// Only a refused request can have an invalid name.
		rec.Fence = g.shownFence(fence)
		rec.Outcome = string(tokens.ReasonBackendUnavailable)
		if r, ok := tokens.AsRefusal(err); ok {
			rec.Outcome = string(r.Reason)
			if r.Term != 0 {
				rec.Term = uint64(r.Term)
			}
			if r.HighWater > hw {
				rec.HighWaterAfter = uint64(r.HighWater)
			}
			if r.Metadata["outcome"] == "unknown" {
				rec.Outcome += " (outcome unknown)"
			}
		}
	} else if t > hw {
		rec.HighWaterAfter = uint64(t)
	}
	return rec
}

// enter takes one of backend's in-flight slots, or refuses the write with
// OVERLOADED when all are taken: past the bound, writes would only queue
// for the backend's connections while their callers' deadlines ran out.
// The caller gives the slot back.
func (g *Gateway) enter(backend int, fence string, t tokens.Token) error {
	if n := g.inflight[backend].Add(1); n > int64(g.cfg.MaxInFlight) {
		g.inflight[backend].Add(-1)
		return tokens.Refuse(tokens.ReasonOverloaded, fence, t,
			"%d writes in flight to %s, limit is %d; retry with backoff", n-1, backends[backend], g.cfg.MaxInFlight)
	}
	return nil
}

// admit parses the token, checks the request's shape and decides on the
// token from memory of backend's marks, asking etcd when it is above
// everything known. It returns the term it decided with.
func (g *Gateway) admit(ctx context.Context, backend int, fence, rawToken string, n int, now time.Time) (tokens.Token, election.Term, error) {
	t, err := tokens.Parse(rawToken)
	switch {
	case errors.Is(err, tokens.ErrMissing):
		return 0, election.Term{}, tokens.Refuse(tokens.ReasonMissingToken, fence, 0, "a write needs a %s header (gRPC metadata %q)", tokens.Header, tokens.MetadataKey)
	case err != nil:
		return 0, election.Term{}, tokens.Refuse(tokens.ReasonInvalidToken, fence, 0, "fencing token %.32q is not a decimal integer in [1, 2^64)", rawToken)
	}
	if !ValidFenceName(fence, g.cfg.MaxFenceName) {
		return t, election.Term{}, tokens.Refuse(tokens.ReasonInvalidRequest, fence, t,
			"fence name %.64q: want 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", fence, g.cfg.MaxFenceName)
	}
	switch {
	case n == 0:
		return t, election.Term{}, tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "a write needs at least one statement or command")
	case n > g.cfg.MaxStatements:
		return t, election.Term{}, tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "%d statements or commands, limit is %d", n, g.cfg.MaxStatements)
	}
	hw := g.trackers[backend].HighWater(fence)
	term := g.terms.Term(fence)
	o := tokens.Decide(t, hw, term)
	// A fence read before use is verified whenever memory would let the
	// write through, or says its term ended (a later term may have begun:
	// then the answer is STALE_TOKEN): every write reads, and those
	// reads are bounded as the writes in flight are.
	//
	// So is a fence whose source knows its memory has fallen behind (the
	// etcd watch lost): the term it remembers may have ended, and a zombie
	// would be let through for as long as the watch stays lost. Its
	// writes read etcd, and are refused ETCD_UNAVAILABLE while it cannot
	// be read.
	mayPass := o != tokens.Stale && o != tokens.Unknown
	sourceReads := mayPass && g.readFirst != nil && g.readFirst(backends[backend], fence)
	readFirst := sourceReads || (mayPass && g.fresh != nil && !g.fresh(fence))
	if o == tokens.Verify || readFirst {
		// A token above every known term is rate limited, anyone can
		// send one, a lost watch or not; but not on a fence whose source
		// is read before every use (redis-lease), where each new
		// holder's first write is one and the read is the source's own,
		// bounded below as the others.
		if o == tokens.Verify && !sourceReads && !g.verifies.allow(fence, now) {
			r := tokens.Refuse(tokens.ReasonOverloaded, fence, t,
				"too many tokens above every known term of election %q to verify with etcd; retry with backoff", fence)
			r.HighWater, r.Term = hw, tokens.Token(term.Rev)
			return t, term, r
		}
		if readFirst {
			// Every such write reads: bounded as the writes in flight
			// are, or a client with a current token could make one etcd
			// read per request while a watch is lost.
			if n := g.reading[backend].Add(1); n > int64(g.cfg.MaxInFlight) {
				g.reading[backend].Add(-1)
				r := tokens.Refuse(tokens.ReasonOverloaded, fence, t,
					"%d writes to %s waiting for an etcd read of their term, limit is %d; retry with backoff", n-1, backends[backend], g.cfg.MaxInFlight)
				r.HighWater, r.Term = hw, tokens.Token(term.Rev)
				return t, term, r
			}
			defer g.reading[backend].Add(-1)
		}
		vctx, cancel := context.WithTimeout(ctx, g.cfg.VerifyTimeout)
		var held bool
		term, held, err = g.terms.Verify(vctx, fence, int64(t))
		cancel()
		if err != nil {
			r := tokens.Refuse(tokens.ReasonEtcdUnavailable, fence, t, "cannot verify term %d of election %q", t, fence)
			r.Err = err
			return t, term, r
		}
		o = tokens.DecideVerified(t, hw, term, held)
	}
	return t, term, g.refusal(o, fence, t, hw, term)
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
		if term.Rev == 0 && term.Last == 0 && hw == 0 {
			r.Msg += " (it has had no leader at all: is the fence name right?)"
		}
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

// learn folds backend's answer to a write of token t, admitted in term,
// into that backend's in-memory marks. A mark the backend reports above
// every term known is suspect and left out (tokens.Tracker.RaiseWithin).
func (g *Gateway) learn(ctx context.Context, backend int, fence string, t tokens.Token, term election.Term, err error) {
	tr := &g.trackers[backend]
	if err == nil {
		tr.Raise(fence, t) // admitted, so t is a known term
		return
	}
	r, ok := tokens.AsRefusal(err)
	if !ok || r.Reason != tokens.ReasonStaleToken {
		return
	}
	ceiling := tokens.Ceiling(term)
	if r.HighWater > ceiling {
		// The watch may have delivered a newer term during the write.
		ceiling = max(ceiling, tokens.Ceiling(g.terms.Term(fence)))
	}
	if tr.RaiseWithin(fence, r.HighWater, ceiling) {
		return
	}
	g.metrics.suspectHighWater(backend)
	if log, suppressed := g.refusals.admit(refusalKey{backend, fence, reasonSuspect, r.HighWater}, g.now()); log {
		attrs := []slog.Attr{
			slog.String("backend", backends[backend]),
			slog.String("fence", fence),
			slog.Uint64("token", uint64(t)),
			slog.Uint64("high_water", uint64(r.HighWater)),
			slog.Uint64("highest_known_term", uint64(ceiling)),
		}
		if suppressed > 0 {
			attrs = append(attrs, slog.Uint64("identical_not_logged", suppressed))
		}
		g.log.LogAttrs(ctx, slog.LevelWarn,
			"backend reports a high-water mark above every known term of the election; not used to refuse writes from memory", attrs...)
	}
}

// reasonSuspect keys the log lines of suspect high-water marks apart from
// refusals.
const reasonSuspect tokens.Reason = "suspect_high_water"

// OtherFences is the fence label value of refusals for fences this replica
// knows nothing of (no election seen, no write accepted) and for invalid
// fence names: they share one series, however many names are tried.
const OtherFences = "_other"

// fenceLabel is fence's value for the fence metric label.
func (g *Gateway) fenceLabel(fence string) string {
	if !ValidFenceName(fence, maxFenceLabel) || !g.knownFence(fence) {
		return OtherFences
	}
	return fence
}

// shownFenceBytes bounds what log lines, audit records and the refusal
// log's memory carry of an invalid fence name.
const shownFenceBytes = 64

// shownFence is fence as log lines, audit records and the refusal log
// name it: whole when it is a valid name or short, else its first
// shownFenceBytes bytes and its length. A client can send a name of
// megabytes, and the refusal log remembers the names it logged.
func (g *Gateway) shownFence(fence string) string {
	if len(fence) <= shownFenceBytes || ValidFenceName(fence, g.cfg.MaxFenceName) {
		return fence
	}
	n := shownFenceBytes
	for n > 0 && !utf8.RuneStart(fence[n]) {
		n--
	}
	return fence[:n] + "…(" + strconv.Itoa(len(fence)) + " bytes)"
}

func (g *Gateway) finish(ctx context.Context, backend int, fence string, t tokens.Token, start, end time.Time, err error) {
	now := g.now()
	if end.IsZero() {
		end = now
	}
	var reason tokens.Reason
	if err != nil {
		shown := g.shownFence(fence)
		r, ok := tokens.AsRefusal(err)
		if !ok {
			// Backends answer with refusals; anything else is a bug worth seeing.
			r = &tokens.RefusalError{Reason: tokens.ReasonBackendUnavailable, Fence: fence, Token: t, Err: err}
			g.log.ErrorContext(ctx, "unexpected backend error", "fence", shown, "token", uint64(t), "err", err)
		}
		reason = r.Reason
		if log, suppressed := g.refusals.admit(refusalKey{backend, shown, reason, t}, now); log {
			attrs := make([]slog.Attr, 0, 8)
			attrs = append(attrs,
				slog.String("backend", backends[backend]),
			)
			if p := g.protocolOf(ctx); p != "" {
				attrs = append(attrs, slog.String("protocol", p))
			}
			attrs = append(attrs,
				slog.String("fence", shown),
				slog.Uint64("token", uint64(t)),
				slog.String("reason", string(reason)),
			)
			// Zero means unknown: never looked up (COMMAND_NOT_ALLOWED, INVALID_REQUEST
			// are refused before the fence is read), or no leader.
			if r.HighWater != 0 {
				attrs = append(attrs, slog.Uint64("high_water", uint64(r.HighWater)))
			}
			if r.Term != 0 {
				attrs = append(attrs, slog.Uint64("term", uint64(r.Term)))
			}
			attrs = append(attrs, slog.String("err", err.Error()))
			if suppressed > 0 {
				attrs = append(attrs, slog.Uint64("identical_not_logged", suppressed))
			}
			g.log.LogAttrs(ctx, slog.LevelWarn, "write refused", attrs...)
		}
	}
	label := ""
	if reason != "" && g.metrics != nil {
		label = g.fenceLabel(fence)
	}
	g.metrics.observe(backend, label, reason, end.Sub(start).Seconds())
}

// countRead counts a refused read of fence like a refused write's reason.
func (g *Gateway) countRead(fence string, err error) {
	if r, ok := tokens.AsRefusal(err); ok && g.metrics != nil {
		g.metrics.rejected(g.fenceLabel(fence), r.Reason)
	}
}

// FenceState is a fence as reported by GetFence and ListFences.
type FenceState struct {
	Name      string
	HighWater tokens.Token
	Term      election.Term
}

// Fence reports fence's high-water mark from the backends (the highest, if
// both hold it) and its election's term as this replica knows it.
func (g *Gateway) Fence(ctx context.Context, name string) (FenceState, error) {
	start := g.now()
	gr, err := g.authorize(ctx, policy.ActionFenceRead, name)
	if err != nil {
		return FenceState{}, g.refusedRead(ctx, name, gr, start, err)
	}
	if !ValidFenceName(name, g.cfg.MaxFenceName) {
		return FenceState{}, g.refusedRead(ctx, name, gr, start,
			tokens.Refuse(tokens.ReasonInvalidRequest, name, 0, "invalid fence name %.64q", name))
	}
	f := FenceState{Name: name, Term: g.terms.Term(name)}
	for _, b := range g.highWaters() {
		hw, _, err := b(ctx, name)
		if err != nil {
			return FenceState{}, g.refusedRead(ctx, name, gr, start, err)
		}
		f.HighWater = max(f.HighWater, hw)
	}
	return f, nil
}

// refusedRead audits and counts a read of fence refused with err, and
// returns err: every refused read leaves one record, as every write does.
// An error of a backend is BACKEND_UNAVAILABLE, as for a write.
func (g *Gateway) refusedRead(ctx context.Context, fence string, gr grant, start time.Time, err error) error {
	if _, ok := tokens.AsRefusal(err); !ok {
		err = &tokens.RefusalError{Reason: tokens.ReasonBackendUnavailable, Fence: fence, Err: err}
	}
	if g.audit != nil {
		g.audit.Write(g.auditRecord(ctx, policy.ActionFenceRead, -1, fence, 0, election.Term{}, 0, gr, start, err))
	}
	g.countRead(fence, err)
	return err
}

func (g *Gateway) highWaters() []func(context.Context, string) (tokens.Token, bool, error) {
	var out []func(context.Context, string) (tokens.Token, bool, error)
	if g.pg != nil {
		out = append(out, g.pg.HighWater)
	}
	if g.rd != nil {
		out = append(out, g.rd.HighWater)
	}
	return out
}

// Fences reports every fence a backend stores or the election watch knows,
// sorted by name.
// With a policy, only the fences the caller may read are listed.
func (g *Gateway) Fences(ctx context.Context) ([]FenceState, error) {
	start := g.now()
	// An anonymous caller where authentication is required is refused
	// outright, not shown an empty list.
	principal, err := g.authenticate(ctx, "")
	if err != nil {
		return nil, g.refusedRead(ctx, "", grant{}, start, err)
	}
	byName := map[string]*FenceState{}
	get := func(name string) *FenceState {
		f, ok := byName[name]
		if !ok {
			f = &FenceState{Name: name, Term: election.Term{Election: name}}
			byName[name] = f
		}
		return f
	}
	if g.pg != nil {
		rows, err := g.pg.Fences(ctx)
		if err != nil {
			return nil, g.refusedRead(ctx, "", grant{}, start, err)
		}
		for _, r := range rows {
			f := get(r.Name)
			f.HighWater = max(f.HighWater, r.HighWater)
		}
	}
	if g.rd != nil {
		rows, err := g.rd.Fences(ctx)
		if err != nil {
			return nil, g.refusedRead(ctx, "", grant{}, start, err)
		}
		for _, r := range rows {
			f := get(r.Name)
			f.HighWater = max(f.HighWater, r.HighWater)
		}
	}
	for _, t := range g.terms.Terms() {
		// A term learnt only from a token a client sent, of a fence no
		// backend stores, is no fence: anyone may send one for a new name
		// and have the write refused (knownElection).
		if _, stored := byName[t.Election]; stored || g.knownElection(t) {
			get(t.Election).Term = t
		}
	}
	out := make([]FenceState, 0, len(byName))
	shadowed := false
	for _, f := range byName {
		if g.policy != nil {
			if d := g.policy.Decide(principal, f.Name, policy.ActionFenceRead); !d.Allowed {
				if !g.cfg.PolicyShadow {
					continue
				}
				// Shown in shadow mode; the listing enforce mode would
				// narrow is counted and logged once, not once a fence.
				if !shadowed {
					shadowed = true
					_, _ = g.denied(ctx, principal, policy.ActionFenceRead, f.Name, d)
				}
			}
		}
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b FenceState) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Ready reports whether every configured backend answers and the audit
// log, if any, is not stuck on a write.
func (g *Gateway) Ready(ctx context.Context) error {
	if r, ok := g.audit.(interface{ Ready() error }); ok {
		if err := r.Ready(); err != nil {
			return err
		}
	}
	if g.pg != nil {
		if err := g.pg.Ping(ctx); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	if g.rd != nil {
		if err := g.rd.Ping(ctx); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	return nil
}
