package proxy

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy/audit"
	"github.com/fencegate/fencegate/proxy/coalesce"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/tokens"
)

// Admission is one transaction of a protocol front that applies writes
// itself (the PostgreSQL listener runs the fence check inside the client's
// own transaction, on the client's own server connection). The pipeline
// has authorized it, decided on its token from memory or etcd, and taken an
// in-flight slot; the front runs the fence check and the statements, then
// calls Done exactly once with the outcome.
type Admission struct {
	g       *Gateway
	ctx     context.Context
	backend int
	fence   string
	t       tokens.Token
	term    election.Term
	hw      tokens.Token
	gr      grant
	start   time.Time
	checked time.Time // when the fence check answered (Checked)
	done    bool
	// pol is the policy last found to allow the transaction (at
	// admission, then at each Revoked that decided again); nil without a
	// policy that can change.
	pol atomic.Pointer[policy.Policy]
}

// Checked records that the transaction's fence check passed: the
// request duration fencegate reports for it ends here, as a write's ends
// with its answer, and not with the transaction, whose length is the
// client's (its own work while the transaction is open is no latency of
// fencegate's or the database's). Called by the front, before Done.
func (a *Admission) Checked() {
	if a.checked.IsZero() {
		a.checked = a.g.now()
	}
}

// AdmitSQL admits a PostgreSQL transaction of fence with the raw token the
// client gave: the same authorization (action sql.write), token decision
// and in-flight bound as Exec. A stale or ended token is refused here,
// without a backend round trip, whenever this replica already knows it is.
// On error nothing is to be sent and the error is counted already.
func (g *Gateway) AdmitSQL(ctx context.Context, fence, rawToken string) (*Admission, error) {
	if g.pg == nil {
		return nil, fmt.Errorf("%w: PostgreSQL (start fencegate with --postgres-dsn)", ErrNotConfigured)
	}
	a := &Admission{g: g, ctx: ctx, backend: backendPostgres, fence: fence, start: g.now()}
	if g.policyNow != nil {
		// Taken before deciding: a reload in between makes Revoked decide
		// again, never miss the change.
		a.pol.Store(g.policyNow())
	}
	var err error
	a.gr, err = g.authorize(ctx, policy.ActionSQLWrite, fence)
	a.hw = g.auditHighWater(backendPostgres, fence)
	if err == nil {
		a.t, a.term, err = g.admit(ctx, backendPostgres, fence, rawToken, 1, a.start)
	} else {
		a.t = tokenOf(err, rawToken)
	}
	if err == nil {
		err = g.enter(backendPostgres, fence, a.t)
	}
	if err != nil {
		a.record(err, false, "", 0, false)
		return nil, err
	}
	return a, nil
}

// Ended reports whether the transaction may no longer go on, without a
// round trip: its term ended since it was admitted, as far as this
// replica's memory tells (the STALE_TOKEN refusal when a later term began
// or a later token wrote, TERM_ENDED when the election lost its leader),
// or the policy in force no longer allows its caller sql.write on its
// fence (NOT_AUTHORIZED, see Revoked); nil while neither holds or memory
// cannot tell. A transaction still open under an ended term holds the
// fence's row with its check, and the next term's first write waits for
// it; one whose caller was cut off must not commit: the front that keeps
// it open ends it. Ended may be called from any goroutine, before or after
// Done.
func (a *Admission) Ended() *tokens.RefusalError {
	if r := a.termEnded(); r != nil {
		return r
	}
	return a.Revoked()
}

// Revoked reports whether the policy in force no longer allows the
// transaction's caller sql.write on its fence: the NOT_AUTHORIZED refusal
// a new transaction of the caller's would get, nil while it is allowed (or
// the policy only logs, Config.PolicyShadow). It decides again only when
// the policy changed since the last decision that allowed it (a pointer
// compare otherwise), so a front may call it at every message. Revoked may
// be called from any goroutine, before or after Done.
func (a *Admission) Revoked() *tokens.RefusalError {
	g := a.g
	if g.policyNow == nil {
		return nil
	}
	p := g.policyNow()
	if p == a.pol.Load() {
		return nil
	}
	_, err := g.authorize(a.ctx, policy.ActionSQLWrite, a.fence)
	if err == nil {
		// Decided with p or a later policy: a later one is decided
		// again at the next call.
		a.pol.Store(p)
		return nil
	}
	r, ok := tokens.AsRefusal(err)
	if !ok {
		r = tokens.Refuse(tokens.ReasonNotAuthorized, a.fence, a.t, "%v", err)
	}
	r.Token = a.t
	return r
}

// termEnded is Ended's look at the term.
func (a *Admission) termEnded() *tokens.RefusalError {
	return a.g.termOver(a.backend, a.fence, a.t)
}

// termOver is the refusal of a write admitted with t whose term, as this
// replica's memory tells, has ended since (STALE_TOKEN when a later term
// began or a later token wrote, TERM_ENDED when the election lost its
// leader); nil while it has not or memory cannot tell.
func (g *Gateway) termOver(backend int, fence string, t tokens.Token) *tokens.RefusalError {
	hw := g.trackers[backend].HighWater(fence)
	term := g.terms.Term(fence)
	switch o := tokens.Decide(t, hw, term); o {
	case tokens.Stale, tokens.Ended:
		return g.refusal(o, fence, t, hw, term).(*tokens.RefusalError) //nolint:errorlint // refusal returns its own unwrapped *RefusalError for Stale and Ended; no errors.As on the hot path
	}
	return nil
}

// sendChecker is a backend that decides again on a write's token as it
// leaves its queue (postgres.Backend, redis.Backend).
type sendChecker interface{ SetSendCheck(coalesce.SendCheck) }

// checkSends has each backend refuse, as they are about to be sent, the
// writes whose term ended while they waited for a connection: rule 1
// refuses an ended term as soon as fencegate learns of it, and a write can
// wait in the queue until its caller's deadline
// (TestRedTeam25QueuedWriteOutlivesItsTerm).
func (g *Gateway) checkSends() {
	for backend, b := range [...]any{backendPostgres: g.pg, backendRedis: g.rd} {
		if s, ok := b.(sendChecker); ok {
			s.SetSendCheck(func(fence string, t tokens.Token) *tokens.RefusalError { return g.termOver(backend, fence, t) })
		}
	}
}

// Token is the admitted token.
func (a *Admission) Token() tokens.Token { return a.t }

// Audited reports whether Done's fingerprint is written anywhere (an
// audit log is configured), so a front computes it only then.
func (a *Admission) Audited() bool { return a.g.Audited() }

// Audited reports whether an audit log is configured.
func (g *Gateway) Audited() bool { return g.audit != nil }

// Role is the PostgreSQL role the policy runs the transaction's statements
// as, or "" for the session's own.
func (a *Admission) Role() string { return a.gr.role }

// Done reports the transaction's outcome: nil when it committed with the
// fence check, else a *tokens.RefusalError (the fence check refused, or a
// statement failed; see postgres.RefusalOf; one whose fate is unknown has
// metadata "outcome": "unknown"). Only nil raises the replica's mark. A
// transaction its client rolled back is RolledBack's, not Done's. fingerprint is the audit
// fingerprint of the statements (audit.Fingerprint of their text), rows
// the rows they affected. Done releases the in-flight slot; calls after the
// first are ignored.
func (a *Admission) Done(err error, fingerprint string, rows int64) {
	a.end(err, fingerprint, rows, false)
}

// RolledBack reports a transaction its client rolled back (or left)
// without an error: fencegate accepted its token and nothing of it was
// applied. It is counted accepted, as nothing was refused, raises no mark,
// and is audited accepted with rolled_back set and no rows. It releases
// the in-flight slot; it and Done count once between them.
func (a *Admission) RolledBack(fingerprint string) {
	a.end(nil, fingerprint, 0, true)
}

func (a *Admission) end(err error, fingerprint string, rows int64, rolledBack bool) {
	if a.done {
		return
	}
	a.done = true
	a.g.inflight[a.backend].Add(-1)
	if !rolledBack {
		a.g.learn(a.ctx, a.backend, a.fence, a.t, a.term, err)
	}
	a.record(err, true, fingerprint, rows, rolledBack)
}

func (a *Admission) record(err error, ran bool, fingerprint string, rows int64, rolledBack bool) {
	g := a.g
	g.finish(a.ctx, a.backend, a.fence, a.t, a.start, a.checked, err)
	if g.audit == nil {
		return
	}
	rec := g.auditRecord(a.ctx, policy.ActionSQLWrite, a.backend, a.fence, a.t, a.term, a.hw, a.gr, a.start, err)
	if ran {
		rec.Statements, rec.Rows = fingerprint, rows
	} else {
		rec.Statements = audit.Fingerprint()
	}
	rec.RolledBack = rolledBack
	g.audit.Write(rec)
}
