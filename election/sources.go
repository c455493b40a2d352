package election

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// The kinds of term source a fence may be guarded by.
const (
	// SourceEtcd: an etcd election fencegate watches (the default).
	SourceEtcd = "etcd"
	// SourceMonotonic: an election fencegate cannot see (a Kubernetes
	// Lease's leaseTransitions, a Raft term, any counter). Only the
	// high-water rule applies.
	SourceMonotonic = "monotonic"
	// SourceZooKeeper: a ZooKeeper election (Curator LeaderLatch, kazoo
	// Election or Lock); the term is the leader candidate's czxid.
	SourceZooKeeper = "zookeeper"
	// SourcePostgresTerm: a PostgreSQL advisory lock whose winner raises
	// a leadership_term row; checked inside the fenced transaction.
	SourcePostgresTerm = "postgres-term"
	// SourceRedisLease: a Redis SET NX PX lease with an INCR counter.
	SourceRedisLease = "redis-lease"
)

// Kinds are the term source kinds a route may name.
var Kinds = []string{SourceEtcd, SourceMonotonic, SourceZooKeeper, SourcePostgresTerm, SourceRedisLease}

// Source is where a fence's terms come from: what tokens.TermSource asks
// of one, and the terms it knows.
type Source interface {
	Term(name string) Term
	Verify(ctx context.Context, name string, token int64) (Term, bool, error)
	Terms() []Term
}

// Route names the source of the fences Pattern matches: a fence name, or
// a prefix ending in '*'.
type Route struct {
	Pattern string
	Kind    string
}

// ParseRoutes parses a comma-separated list of PATTERN=KIND, e.g.
// "lease-*=monotonic,raft=monotonic".
func ParseRoutes(s string) ([]Route, error) {
	var routes []Route
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		pat, kind, ok := strings.Cut(part, "=")
		if !ok || pat == "" {
			return nil, fmt.Errorf("election: term source %q: want PATTERN=KIND, e.g. lease-*=monotonic", part)
		}
		if i := strings.IndexByte(pat, '*'); i >= 0 && i != len(pat)-1 {
			return nil, fmt.Errorf("election: term source %q: '*' only at the end of a pattern", part)
		}
		if !slices.Contains(Kinds, kind) {
			return nil, fmt.Errorf("election: term source %q: unknown kind %q (want one of %s)", part, kind, strings.Join(Kinds, ", "))
		}
		routes = append(routes, Route{Pattern: pat, Kind: kind})
	}
	return routes, nil
}

func (r Route) matches(name string) bool {
	if p, ok := strings.CutSuffix(r.Pattern, "*"); ok {
		return strings.HasPrefix(name, p)
	}
	return name == r.Pattern
}

// Router is the term source of every fence: each asks the source of the
// first route that matches it, else the etcd watcher.
type Router struct {
	etcd   Source
	routes []Route
	srcs   []Source // of routes, by index
	// others are the sources routes name besides etcd, by kind.
	others map[string]Source
}

// NewRouter routes fences to etcd (the watcher; nil when fencegate runs
// without etcd, and then a fence no route takes has no term: its tokens
// are UNKNOWN_TERM) or to the source of each route's kind, by routes in
// order. A monotonic source is made when others has none; any other
// kind a route names must be in others.
func NewRouter(etcd Source, routes []Route, others map[string]Source) (*Router, error) {
	if etcd == nil {
		etcd = noSource{}
	}
	r := &Router{etcd: etcd, routes: routes, others: map[string]Source{}}
	for kind, src := range others {
		r.others[kind] = src
	}
	for _, rt := range routes {
		var src Source
		switch rt.Kind {
		case SourceEtcd:
			src = etcd
		case SourceMonotonic:
			if r.others[SourceMonotonic] == nil {
				r.others[SourceMonotonic] = NewMonotonic()
			}
			src = r.others[SourceMonotonic]
		default:
			src = r.others[rt.Kind]
			if src == nil {
				return nil, fmt.Errorf("election: term source %s=%s is not configured", rt.Pattern, rt.Kind)
			}
		}
		r.srcs = append(r.srcs, src)
	}
	return r, nil
}

func (r *Router) source(name string) Source {
	for i := range r.routes {
		if r.routes[i].matches(name) {
			return r.srcs[i]
		}
	}
	return r.etcd
}

// KindOf names the source of fence name.
func (r *Router) KindOf(name string) string {
	for i := range r.routes {
		if r.routes[i].matches(name) {
			return r.routes[i].Kind
		}
	}
	return SourceEtcd
}

// Term is the source's term of election name.
func (r *Router) Term(name string) Term { return r.source(name).Term(name) }

// Verify asks the source of election name.
func (r *Router) Verify(ctx context.Context, name string, token int64) (Term, bool, error) {
	return r.source(name).Verify(ctx, name, token)
}

// Freshness is a Source whose memory of terms can fall behind what it
// follows, and knows when it has (the etcd watch, lost).
type Freshness interface {
	// Fresh reports whether the term of name in memory is current as far
	// as the source knows.
	Fresh(name string) bool
}

// Fresh asks the source of election name, if it can tell (Freshness);
// any other source is fresh.
func (r *Router) Fresh(name string) bool {
	f, ok := r.source(name).(Freshness)
	return !ok || f.Fresh(name)
}

// FromTokens reports whether name's terms are learnt from the tokens
// clients send (its source is a TokenLearner that says so) rather
// than from an election the source sees: such a term does not say that
// the fence exists, or that any write with it was accepted.
func (r *Router) FromTokens(name string) bool {
	l, ok := r.source(name).(TokenLearner)
	return ok && l.FromTokens(name)
}

// Lower lowers name's term in its source, if that source only knows the
// tokens it was shown (Lowerer); it reports whether the term was lowered.
func (r *Router) Lower(name string, token int64) bool {
	l, ok := r.source(name).(Lowerer)
	return ok && l.Lower(name, token)
}

// Terms are every source's terms of the fences routed to it, by name.
func (r *Router) Terms() []Term {
	var out []Term
	for _, t := range r.etcd.Terms() {
		if r.source(t.Election) == r.etcd {
			out = append(out, t)
		}
	}
	kinds := make([]string, 0, len(r.others))
	for kind := range r.others {
		kinds = append(kinds, kind)
	}
	slices.Sort(kinds)
	for _, kind := range kinds {
		src := r.others[kind]
		for _, t := range src.Terms() {
			if r.source(t.Election) == src {
				out = append(out, t)
			}
		}
	}
	slices.SortFunc(out, CompareTerms)
	return out
}

// noSource is the etcd source of a fencegate without etcd: no term, and
// no token was ever held.
type noSource struct{}

func (noSource) Term(name string) Term { return Term{Election: name} }
func (noSource) Verify(_ context.Context, name string, _ int64) (Term, bool, error) {
	return Term{Election: name}, false, nil
}
func (noSource) Terms() []Term { return nil }

// Monotonic is the source of fences whose elections fencegate cannot
// see. Any token at or above the fence's high-water mark is taken: its
// term is the highest token verified so far, so a token below it is
// refused without a round trip, and a higher one is admitted as a new
// term (Verify holds it). Nothing ends a term (no TERM_ENDED), and a
// forged high token fences out the real leader: the policy is what stands
// against forgery.
//
// A term is learnt when its token is verified, before the write is tried
// (a pgwire transaction of a lower token is ended by it), so a term says
// only that a client sent the token: the write may have been refused
// (FromTokens). Memory holds at most MaxMonotonicFences names; past that,
// a new name's term takes an arbitrary other name's place. A name whose
// term is forgotten is verified again at its next write, and the backend,
// whose high-water check is final, still refuses a token below its mark:
// forgetting loses only the refusal from memory, as a replica that never
// saw the term has none.
type Monotonic struct {
	mu    sync.RWMutex
	terms map[string]int64
	// max bounds len(terms); MaxMonotonicFences unless a test lowers it.
	max int
}

// MaxMonotonicFences bounds the names a Monotonic source remembers: each
// verified token of a new name adds one, and anyone may send one.
const MaxMonotonicFences = 100_000

// NewMonotonic returns an empty Monotonic source.
func NewMonotonic() *Monotonic {
	return &Monotonic{terms: map[string]int64{}, max: MaxMonotonicFences}
}

// Term is the highest token verified for name; the zero Term before any.
func (m *Monotonic) Term(name string) Term {
	m.mu.RLock()
	rev := m.terms[name]
	m.mu.RUnlock()
	return monotonicTerm(name, rev)
}

// Verify takes token as name's term if it is above the one known.
func (m *Monotonic) Verify(_ context.Context, name string, token int64) (Term, bool, error) {
	m.mu.Lock()
	old, ok := m.terms[name]
	if !ok && len(m.terms) >= m.max {
		for other := range m.terms {
			delete(m.terms, other)
			if len(m.terms) < m.max {
				break
			}
		}
	}
	rev := max(old, token)
	m.terms[name] = rev
	m.mu.Unlock()
	return monotonicTerm(name, rev), true, nil
}

// FromTokens reports that every term of a Monotonic source was learnt
// from a token a client sent, not from an election seen or a write
// accepted.
func (*Monotonic) FromTokens(string) bool { return true }

// Lower lowers name's term to token if it is higher (0 forgets it): a
// fence reset on purpose after a forged or mistaken high token.
// It reports whether the term was above token.
func (m *Monotonic) Lower(name string, token int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	rev, ok := m.terms[name]
	switch {
	case !ok || token >= rev:
		return false
	case token <= 0:
		delete(m.terms, name)
	default:
		m.terms[name] = token
	}
	return true
}

// TokenLearner is a source that may learn a term from a token a client
// sent (Monotonic): FromTokens reports whether name's terms are such.
type TokenLearner interface {
	FromTokens(name string) bool
}

// Lowerer is a source whose terms an operator may lower (fence reset):
// one that only knows the tokens it was shown.
type Lowerer interface {
	Lower(name string, token int64) bool
}

// Terms are the fences' terms, by name.
func (m *Monotonic) Terms() []Term {
	m.mu.RLock()
	out := make([]Term, 0, len(m.terms))
	for name, rev := range m.terms {
		out = append(out, monotonicTerm(name, rev))
	}
	m.mu.RUnlock()
	slices.SortFunc(out, CompareTerms)
	return out
}

func monotonicTerm(name string, rev int64) Term {
	if rev == 0 {
		return Term{Election: name}
	}
	return Term{Election: name, Rev: rev, Last: rev}
}
