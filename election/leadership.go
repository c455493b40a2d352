package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Why a Leadership ended: the cause of its Context.
var (
	// ErrResigned: Resign was called.
	ErrResigned = errors.New("election: resigned")
	// ErrLeaseExpired: etcd says the lease is gone (expired or revoked).
	ErrLeaseExpired = errors.New("election: lease expired or revoked")
	// ErrLeaseUnproven: no keep-alive proved the lease alive in time; the
	// lease may still be alive, but could expire within SafetyMargin.
	ErrLeaseUnproven = errors.New("election: lease not proven alive within the safety margin")
	// ErrKeyDeleted: the candidate key was deleted, e.g. by another client.
	ErrKeyDeleted = errors.New("election: leadership key deleted")
)

// keepAliveRetry is how soon a failed keep-alive is retried.
const keepAliveRetry = 250 * time.Millisecond

// Leadership is a won election: a term. It ends when Resign is called,
// when etcd reports its lease gone or its key deleted, or when the lease
// can no longer be proven alive: no keep-alive answered in time to be sure
// the lease lasts SafetyMargin longer. Done then closes and Context is
// cancelled; Err says why.
//
// The end is seen locally and late at worst by SafetyMargin minus the time
// the process is paused: a worker paused longer may act after its lease has
// expired. Pass Token with every write to a fenced store; that, not Done,
// is what makes a stale leader harmless.
type Leadership struct {
	client   *clientv3.Client
	election string
	key      string
	value    string
	lease    clientv3.LeaseID
	token    int64
	ttl      time.Duration
	margin   time.Duration
	now      func() time.Time
	log      *slog.Logger

	ctx    context.Context // cancelled when the leadership ends
	cancel context.CancelCauseFunc
	// provenUntil keeps the clock's monotonic reading (time.Now's): a
	// step of the wall clock moves neither the end of the leadership nor
	// a deadline computed from it.
	provenUntil atomic.Pointer[time.Time]
	wg          sync.WaitGroup
}

func newLeadership(ctx context.Context, cfg CampaignConfig, ttl time.Duration, sent time.Time) *Leadership {
	l := &Leadership{
		election: cfg.Election,
		value:    cfg.Value,
		ttl:      ttl,
		margin:   cfg.SafetyMargin,
		now:      cfg.Now,
		log:      cfg.Logger,
	}
	// The leadership outlives the campaign's ctx but keeps its values.
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	until := sent.Add(ttl)
	l.provenUntil.Store(&until)
	return l
}

// Token returns the term: the create revision of the leadership's key. It
// is the fencing token to send with writes.
func (l *Leadership) Token() int64 { return l.token }

// Key returns the leadership's etcd key.
func (l *Leadership) Key() string { return l.key }

// Election returns the election's name.
func (l *Leadership) Election() string { return l.election }

// Lease returns the ID of the lease the key is attached to.
func (l *Leadership) Lease() clientv3.LeaseID { return l.lease }

// Done returns a channel closed when the leadership ends.
func (l *Leadership) Done() <-chan struct{} { return l.ctx.Done() }

// Context returns a context cancelled when the leadership ends, carrying
// the values of Campaign's ctx; context.Cause tells why it ended.
func (l *Leadership) Context() context.Context { return l.ctx }

// Err returns nil while the leadership lasts, then why it ended: one of
// ErrResigned, ErrLeaseExpired, ErrLeaseUnproven, ErrKeyDeleted.
func (l *Leadership) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// ProvenUntil returns the time, by the configured clock, until which the
// lease is proven alive: the send time of the latest answered keep-alive
// plus the TTL it reported. The leadership ends SafetyMargin before it
// unless a newer proof arrives.
func (l *Leadership) ProvenUntil() time.Time { return *l.provenUntil.Load() }

// Resign ends the leadership: it closes Done first, so the holder's own
// goroutines stop before anyone else can be elected, then deletes the key
// and revokes the lease. It may be called after the leadership ended for
// another reason, to release what is left in etcd, and more than once. ctx
// bounds the calls to etcd; an error means the key or lease may remain
// until the lease expires.
func (l *Leadership) Resign(ctx context.Context) error {
	l.cancel(ErrResigned)
	l.wg.Wait()
	if l.client == nil {
		return nil
	}
	_, derr := l.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.token)).
		Then(clientv3.OpDelete(l.key)).
		Commit()
	if derr != nil {
		derr = fmt.Errorf("delete key: %w", derr)
	}
	_, rerr := l.client.Revoke(ctx, l.lease)
	if errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
		rerr = nil
	}
	if rerr != nil {
		rerr = fmt.Errorf("revoke lease: %w", rerr)
	}
	if err := errors.Join(derr, rerr); err != nil {
		return fmt.Errorf("election: resign %q: %w", l.election, err)
	}
	return nil
}

func (l *Leadership) lose(cause error) {
	if l.ctx.Err() != nil {
		return
	}
	l.cancel(cause)
	l.log.Warn("leadership ended", "election", l.election, "token", l.token, "cause", cause)
}

func (l *Leadership) prove(until time.Time) {
	for {
		cur := l.provenUntil.Load()
		if !until.After(*cur) || l.provenUntil.CompareAndSwap(cur, &until) {
			return
		}
	}
}

// keepAlive keeps the lease alive with ka, a single keep-alive returning
// the TTL etcd granted, every third of the TTL, until the leadership ends.
// It ends the leadership when etcd says the lease is gone, or once no
// answer has proven the lease alive until SafetyMargin from now.
func (l *Leadership) keepAlive(ka func(ctx context.Context) (ttl int64, err error)) {
	interval := l.ttl / 3
	for {
		deadline := l.ProvenUntil().Add(-l.margin)
		sent := l.now()
		if !sent.Before(deadline) {
			l.lose(ErrLeaseUnproven)
			return
		}
		cctx, cancel := context.WithTimeout(l.ctx, deadline.Sub(sent))
		ttl, err := ka(cctx)
		cancel()
		if l.ctx.Err() != nil {
			return
		}
		wait := interval
		switch {
		case err == nil && ttl > 0:
			l.prove(sent.Add(time.Duration(ttl) * time.Second))
		case err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound):
			l.lose(ErrLeaseExpired)
			return
		default:
			l.log.Debug("lease keep-alive failed", "election", l.election, "lease", fmt.Sprintf("%x", l.lease), "err", err)
			wait = min(interval, keepAliveRetry)
		}
		next := sent.Add(wait)
		if d := l.ProvenUntil().Add(-l.margin); d.Before(next) {
			next = d
		}
		t := time.NewTimer(next.Sub(l.now()))
		select {
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// watchKey ends the leadership when its key is deleted after revision rev.
func (l *Leadership) watchKey(rev int64) {
	for {
		for wr := range l.client.Watch(clientv3.WithRequireLeader(l.ctx), l.key, clientv3.WithRev(rev)) {
			if wr.Err() != nil || wr.Canceled {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					l.lose(ErrKeyDeleted)
					return
				}
			}
		}
		// The watch broke (compaction, no etcd leader): look at the key,
		// then watch again from there. An unreachable etcd is keepAlive's
		// business.
		t := time.NewTimer(keepAliveRetry)
		select {
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		resp, err := l.client.Get(l.ctx, l.key)
		if err != nil {
			continue
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.token {
			l.lose(ErrKeyDeleted)
			return
		}
		rev = resp.Header.Revision + 1
	}
}

// Value returns the value the candidate campaigned with.
func (l *Leadership) Value() string { return l.value }
