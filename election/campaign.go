package election

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	defaultTTL     = 10 * time.Second
	cleanupTimeout = 5 * time.Second
)

// CampaignConfig configures Campaign.
type CampaignConfig struct {
	// Prefix is the key prefix elections live under. Default DefaultPrefix.
	Prefix string
	// Election is the election's name: non-empty, no '/'. Required.
	Election string
	// Value is what the candidate publishes as its key's value, e.g. its
	// address or name; watchers report it as Term.Leader.
	Value string
	// TTL is the lease's time to live, a whole number of seconds, at least
	// 1s. Default 10s. etcd may grant a longer one (its minimum lease TTL);
	// the granted TTL is what counts.
	TTL time.Duration
	// SafetyMargin is how long before the lease could expire, at the
	// earliest, that the leadership is given up when no keep-alive has
	// proven it alive since. It covers the time the worker needs to notice
	// Done and stop, and clock rate differences with etcd. Default a third
	// of the TTL; at most half of it. Keep-alives are sent every third of
	// the TTL, so with the defaults leadership ends after two keep-alive
	// periods without an answer.
	SafetyMargin time.Duration
	// Now tells the time; default time.Now. Timers measure durations
	// computed from it.
	Now func() time.Time
	// Logger receives keep-alive failures and the end of the leadership.
	// Nil discards them.
	Logger *slog.Logger
}

func (cfg *CampaignConfig) validate() error {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if err := validatePrefix(cfg.Prefix); err != nil {
		return err
	}
	if err := ValidateName(cfg.Election); err != nil {
		return err
	}
	switch {
	case cfg.TTL == 0:
		cfg.TTL = defaultTTL
	case cfg.TTL < time.Second:
		return fmt.Errorf("election: TTL %v is below 1s", cfg.TTL)
	case cfg.TTL%time.Second != 0:
		return fmt.Errorf("election: TTL %v is not a whole number of seconds", cfg.TTL)
	}
	switch {
	case cfg.SafetyMargin == 0:
		cfg.SafetyMargin = cfg.TTL / 3
	case cfg.SafetyMargin < 0:
		return fmt.Errorf("election: negative SafetyMargin %v", cfg.SafetyMargin)
	case cfg.SafetyMargin > cfg.TTL/2:
		return fmt.Errorf("election: SafetyMargin %v is over half the TTL %v", cfg.SafetyMargin, cfg.TTL)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// Campaign puts a candidate key for cfg.Election, attached to a new lease,
// and blocks until the candidate is the leader: until every key of the
// election created before it is gone. The key layout and the leader rule
// are those of etcd's concurrency.Election (and `etcdctl elect`): the key is
// "<prefix>/<election>/<lease ID in hex>" and the leader is the key with the
// lowest create revision, so candidates using any etcd client take part in
// the same election.
//
// If ctx is done before the candidate is elected, Campaign gives up: it
// revokes the lease, which deletes the key, and returns ctx's error. It also
// gives up, with an error matching ErrLeaseExpired, ErrLeaseUnproven or
// ErrKeyDeleted, when the lease or the key is lost while waiting. Once
// Campaign has returned, ctx no longer matters; the Leadership lasts until
// Resign or until the lease is lost.
func Campaign(ctx context.Context, client *clientv3.Client, cfg CampaignConfig) (*Leadership, error) {
	if client == nil {
		return nil, errors.New("election: nil etcd client")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	sent := cfg.Now()
	grant, err := client.Grant(ctx, int64(cfg.TTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("election: campaign for %q: grant lease: %w", cfg.Election, err)
	}
	pfx := electionKeyPrefix(cfg.Prefix, cfg.Election)
	l := newLeadership(ctx, cfg, time.Duration(grant.TTL)*time.Second, sent)
	l.client = client
	l.lease = grant.ID
	l.key = fmt.Sprintf("%s%x", pfx, grant.ID)

	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = l.Resign(cctx) // best effort: the lease expires anyway
	}
	resp, err := client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", 0)).
		Then(clientv3.OpPut(l.key, cfg.Value, clientv3.WithLease(grant.ID))).
		Else(clientv3.OpGet(l.key)).
		Commit()
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("election: campaign for %q: put key: %w", cfg.Election, err)
	}
	l.token = resp.Header.Revision
	if !resp.Succeeded {
		// Cannot happen with a fresh lease, but the key is ours either way.
		l.token = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
	}

	ka := func(ctx context.Context) (int64, error) {
		r, err := client.KeepAliveOnce(ctx, grant.ID)
		if err != nil {
			return 0, err
		}
		return r.TTL, nil
	}
	l.wg.Add(2)
	go func() { defer l.wg.Done(); l.keepAlive(ka) }()
	go func() { defer l.wg.Done(); l.watchKey(l.token + 1) }()

	wctx, wcancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.ctx, wcancel)
	err = waitDeletes(wctx, client, pfx, l.key, l.token)
	stop()
	wcancel()
	if errors.Is(err, ErrKeyDeleted) {
		l.lose(err) // before watchKey says so
	}
	if err == nil && l.ctx.Err() == nil {
		return l, nil
	}
	cause := context.Cause(l.ctx)
	cleanup()
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case cause != nil:
		return nil, fmt.Errorf("election: campaign for %q: %w", cfg.Election, cause)
	default:
		return nil, fmt.Errorf("election: campaign for %q: %w", cfg.Election, err)
	}
}

// waitDeletes waits until no key under pfx was created before token, the
// create revision of own, and fails with ErrKeyDeleted if own is gone by
// then (its lease lost while it waited): read in the same revision, so
// that Campaign never returns a leadership whose key no longer exists.
func waitDeletes(ctx context.Context, client *clientv3.Client, pfx, own string, token int64) error {
	opts := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(token-1))
	for {
		resp, err := client.Txn(ctx).Then(clientv3.OpGet(pfx, opts...), clientv3.OpGet(own, clientv3.WithKeysOnly())).Commit()
		if err != nil {
			return err
		}
		earlier, mine := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
		if len(mine) == 0 || mine[0].CreateRevision != token {
			return ErrKeyDeleted
		}
		if len(earlier) == 0 {
			return nil
		}
		if err := waitDelete(ctx, client, string(earlier[0].Key), resp.Header.Revision); err != nil {
			return err
		}
	}
}

// waitDelete waits for key to be deleted after revision rev, at which it
// existed. It returns nil also when the watch breaks, for the caller to look
// again.
func waitDelete(ctx context.Context, client *clientv3.Client, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Start at rev+1: a watch from a revision etcd has already applied is
	// served by its unsynced-watcher loop, which runs every 100ms and would
	// delay every takeover by up to that much.
	for wr := range client.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if wr.Err() != nil || wr.Canceled {
			return nil
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	return ctx.Err()
}
