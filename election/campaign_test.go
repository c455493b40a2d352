package election

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func campaign(t *testing.T, c *clientv3.Client, cfg CampaignConfig) *Leadership {
	t.Helper()
	l, err := Campaign(t.Context(), c, cfg)
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	t.Cleanup(func() { _ = l.Resign(context.WithoutCancel(t.Context())) })
	return l
}

func waitDone(t *testing.T, l *Leadership) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("Done not closed within 10s")
	}
}

func TestCampaignToken(t *testing.T) {
	c := newClient(t)
	prefix := testPrefix(t)
	l := campaign(t, c, CampaignConfig{Prefix: prefix, Election: "jobs", Value: "worker-1"})
	resp, err := c.Get(t.Context(), l.Key())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get own key: %v, %d keys", err, len(resp.Kvs))
	}
	if got, want := l.Token(), resp.Kvs[0].CreateRevision; got != want {
		t.Errorf("got Token %d, want create revision %d", got, want)
	}
	if got, want := l.Key(), fmt.Sprintf("%s/jobs/%x", prefix, l.Lease()); got != want {
		t.Errorf("got Key %q, want %q", got, want)
	}
	if got := string(resp.Kvs[0].Value); got != "worker-1" {
		t.Errorf("got value %q, want worker-1", got)
	}
	if resp.Kvs[0].Lease != int64(l.Lease()) {
		t.Errorf("got key lease %x, want %x", resp.Kvs[0].Lease, l.Lease())
	}
}

func TestCampaignInteroperates(t *testing.T) {
	c := newClient(t)
	t.Run("etcd election observes and follows ours", func(t *testing.T) {
		prefix := testPrefix(t)
		l := campaign(t, c, CampaignConfig{Prefix: prefix, Election: "jobs", Value: "ours"})
		other := newCandidate(t, c, prefix, "jobs")
		resp, err := other.e.Leader(t.Context())
		if err != nil {
			t.Fatalf("Leader: %v", err)
		}
		if got := string(resp.Kvs[0].Key); got != l.Key() {
			t.Errorf("got leader key %q, want %q", got, l.Key())
		}
		if got := resp.Kvs[0].CreateRevision; got != l.Token() {
			t.Errorf("got leader create revision %d, want Token %d", got, l.Token())
		}
		errc := other.campaignAsync(t, c, "theirs")
		select {
		case err := <-errc:
			t.Fatalf("etcd candidate elected while we lead: %v", err)
		default:
		}
		if err := l.Resign(t.Context()); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("etcd candidate: %v", err)
		}
	})
	t.Run("ours follows etcd election", func(t *testing.T) {
		prefix := testPrefix(t)
		other := newCandidate(t, c, prefix, "jobs")
		other.campaign(t, "theirs")
		type result struct {
			l   *Leadership
			err error
		}
		resc := make(chan result, 1)
		go func() {
			l, err := Campaign(t.Context(), c, CampaignConfig{Prefix: prefix, Election: "jobs", Value: "ours"})
			resc <- result{l, err}
		}()
		waitFor(t, "two candidates", func() bool {
			resp, err := c.Get(t.Context(), prefix+"/jobs/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			return err == nil && resp.Count == 2
		})
		select {
		case r := <-resc:
			t.Fatalf("elected while an etcd candidate leads: %v", r.err)
		default:
		}
		other.resign(t)
		r := <-resc
		if r.err != nil {
			t.Fatalf("Campaign: %v", r.err)
		}
		defer r.l.Resign(t.Context())
		obs, err := other.e.Leader(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if got := obs.Kvs[0].CreateRevision; got != r.l.Token() || r.l.Token() <= other.e.Rev() {
			t.Errorf("got leader rev %d, want Token %d above %d", got, r.l.Token(), other.e.Rev())
		}
	})
}

func TestCampaignCancel(t *testing.T) {
	c := newClient(t)
	prefix := testPrefix(t)
	leader := newCandidate(t, c, prefix, "jobs")
	leader.campaign(t, "theirs")
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := Campaign(ctx, c, CampaignConfig{Prefix: prefix, Election: "jobs"})
		errc <- err
	}()
	count := func() int64 {
		resp, err := c.Get(t.Context(), prefix+"/jobs/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	waitFor(t, "our key", func() bool { return count() == 2 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if got := count(); got != 1 {
		t.Errorf("got %d keys after giving up, want 1", got)
	}
}

func TestLeadershipEnds(t *testing.T) {
	c := newClient(t)
	other := newClient(t)
	tests := []struct {
		name  string
		end   func(t *testing.T, l *Leadership)
		wants []error // any of
	}{
		{"resign", func(t *testing.T, l *Leadership) {
			t.Helper()
			if err := l.Resign(t.Context()); err != nil {
				t.Fatalf("Resign: %v", err)
			}
		}, []error{ErrResigned}},
		{"lease revoked by another client", func(t *testing.T, l *Leadership) {
			t.Helper()
			if _, err := other.Revoke(t.Context(), l.Lease()); err != nil {
				t.Fatalf("revoke: %v", err)
			}
		}, []error{ErrKeyDeleted, ErrLeaseExpired}},
		{"key deleted by another client", func(t *testing.T, l *Leadership) {
			t.Helper()
			if _, err := other.Delete(t.Context(), l.Key()); err != nil {
				t.Fatalf("delete: %v", err)
			}
		}, []error{ErrKeyDeleted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := campaign(t, c, CampaignConfig{Prefix: testPrefix(t), Election: "jobs"})
			if l.Err() != nil || l.Context().Err() != nil {
				t.Fatalf("got Err %v, Context().Err() %v before the end, want nil", l.Err(), l.Context().Err())
			}
			tt.end(t, l)
			waitDone(t, l)
			if l.Context().Err() == nil {
				t.Errorf("Context not cancelled with Done")
			}
			matched := false
			for _, want := range tt.wants {
				matched = matched || errors.Is(l.Err(), want)
			}
			if !matched || !errors.Is(context.Cause(l.Context()), l.Err()) {
				t.Errorf("got Err %v, cause %v, want one of %v", l.Err(), context.Cause(l.Context()), tt.wants)
			}
			resp, err := other.Get(t.Context(), l.Key())
			if err != nil {
				t.Fatal(err)
			}
			if tt.name == "resign" && len(resp.Kvs) != 0 {
				t.Errorf("got key after Resign, want none")
			}
		})
	}
}

// TestLeadershipEndsWhenEtcdUnreachable stops etcd under a leader and checks
// Done closes after SafetyMargin before the lease could expire, by the
// proofs the leader received.
func TestLeadershipEndsWhenEtcdUnreachable(t *testing.T) {
	c := newClient(t)
	const ttl, margin = 3 * time.Second, time.Second
	l, err := Campaign(t.Context(), c, CampaignConfig{Prefix: testPrefix(t), Election: "jobs", TTL: ttl, SafetyMargin: margin})
	if err != nil {
		t.Fatal(err)
	}
	stopEtcd(t)
	stopped := time.Now()
	defer startEtcd(t)
	waitDone(t, l)
	ended := time.Now()
	proven := l.ProvenUntil()
	if !errors.Is(l.Err(), ErrLeaseUnproven) {
		t.Errorf("got Err %v, want ErrLeaseUnproven", l.Err())
	}
	t.Logf("etcd stopped %v before the end; ended %v before the lease could expire (margin %v)",
		ended.Sub(stopped).Round(time.Millisecond), proven.Sub(ended).Round(time.Millisecond), margin)
	if !ended.Before(proven) {
		t.Errorf("ended at %v, want before the proven lease end %v", ended, proven)
	}
	if late := ended.Sub(proven.Add(-margin)); late > 200*time.Millisecond {
		t.Errorf("ended %v after the deadline (proven until - margin), want within 200ms", late)
	}
	// With etcd down Resign can only fail; it must still return by ctx.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := l.Resign(ctx); err == nil {
		t.Errorf("Resign with etcd down: got nil error, want one")
	}
}

// TestKeepAliveDeadline checks the keep-alive loop's timing with a fake
// keep-alive in a synctest bubble.
func TestKeepAliveDeadline(t *testing.T) {
	const ttl, margin = 9 * time.Second, 3 * time.Second
	tests := []struct {
		name string
		// answer is called for each keep-alive; n counts from 0.
		answer   func(ctx context.Context, n int) (int64, error)
		wantErr  error
		wantTime time.Duration // since start, when Done closes
	}{
		{
			name: "no answer after two proofs",
			answer: func(ctx context.Context, n int) (int64, error) {
				if n < 2 {
					return 9, nil
				}
				<-ctx.Done()
				return 0, ctx.Err()
			},
			wantErr: ErrLeaseUnproven,
			// Proofs sent at 0s and 3s: proven until 12s, deadline 9s.
			wantTime: 9 * time.Second,
		},
		{
			name: "errors after one proof",
			answer: func(_ context.Context, n int) (int64, error) {
				if n < 1 {
					return 9, nil
				}
				return 0, errors.New("unavailable")
			},
			wantErr:  ErrLeaseUnproven,
			wantTime: 6 * time.Second,
		},
		{
			name: "lease gone",
			answer: func(_ context.Context, n int) (int64, error) {
				if n < 3 {
					return 9, nil
				}
				return 0, rpctypes.ErrLeaseNotFound
			},
			wantErr:  ErrLeaseExpired,
			wantTime: 9 * time.Second,
		},
		{
			name: "late answers keep it alive",
			answer: func(_ context.Context, n int) (int64, error) {
				if n >= 5 {
					return 0, rpctypes.ErrLeaseNotFound
				}
				time.Sleep(2 * time.Second) // slow, still in time
				return 9, nil
			},
			wantErr: ErrLeaseExpired,
			// Sent every 3s, answered 2s later; the sixth is refused.
			wantTime: 5 * 3 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				cfg := CampaignConfig{Election: "jobs", TTL: ttl, SafetyMargin: margin}
				if err := cfg.validate(); err != nil {
					t.Fatal(err)
				}
				l := newLeadership(t.Context(), cfg, ttl, start)
				n := 0
				done := make(chan struct{})
				go func() {
					defer close(done)
					l.keepAlive(func(ctx context.Context) (int64, error) {
						n++
						return tt.answer(ctx, n-1)
					})
				}()
				<-l.Done()
				<-done
				if got := time.Since(start); got != tt.wantTime {
					t.Errorf("Done closed after %v, want %v", got, tt.wantTime)
				}
				if !errors.Is(l.Err(), tt.wantErr) {
					t.Errorf("got Err %v, want %v", l.Err(), tt.wantErr)
				}
			})
		})
	}
}

func TestCampaignConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     CampaignConfig
		wantErr bool
	}{
		{"defaults", CampaignConfig{Election: "jobs"}, false},
		{"no election", CampaignConfig{}, true},
		{"slash in election", CampaignConfig{Election: "a/b"}, true},
		{"prefix ends in slash", CampaignConfig{Election: "a", Prefix: "/x/"}, true},
		{"ttl below 1s", CampaignConfig{Election: "a", TTL: 500 * time.Millisecond}, true},
		{"ttl not whole seconds", CampaignConfig{Election: "a", TTL: 1500 * time.Millisecond}, true},
		{"margin over half the ttl", CampaignConfig{Election: "a", TTL: 4 * time.Second, SafetyMargin: 3 * time.Second}, true},
		{"negative margin", CampaignConfig{Election: "a", SafetyMargin: -1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.validate()
			if (err != nil) != tt.wantErr {
				t.Errorf("got err %v, want error %v", err, tt.wantErr)
			}
		})
	}
	cfg := CampaignConfig{Election: "jobs"}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.TTL != 10*time.Second || cfg.SafetyMargin != 10*time.Second/3 || cfg.Prefix != DefaultPrefix {
		t.Errorf("got defaults TTL %v margin %v prefix %q, want 10s 3.333s %q", cfg.TTL, cfg.SafetyMargin, cfg.Prefix, DefaultPrefix)
	}
}

// TestCampaignKeyGoneWhileWaiting: a candidate's key deleted in the same
// revision as the leader's (its lease lost while it waited, here both
// deleted at once) must not be elected: waitDeletes would find no earlier
// key and return, and Campaign handed out a leadership whose key was
// gone, unless watchKey happened to see the deletion first.
func TestCampaignKeyGoneWhileWaiting(t *testing.T) {
	c := newClient(t)
	prefix := testPrefix(t)
	leader := newCandidate(t, c, prefix, "jobs")
	leader.campaign(t, "theirs")
	errc := make(chan error, 1)
	go func() {
		l, err := Campaign(t.Context(), c, CampaignConfig{Prefix: prefix, Election: "jobs"})
		if err == nil {
			err = errors.New("elected")
			_ = l.Resign(context.WithoutCancel(t.Context()))
		}
		errc <- err
	}()
	var keys []string
	waitFor(t, "our key", func() bool {
		resp, err := c.Get(t.Context(), prefix+"/jobs/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		keys = keys[:0]
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
		}
		return len(keys) == 2
	})
	if _, err := c.Txn(t.Context()).Then(clientv3.OpDelete(keys[0]), clientv3.OpDelete(keys[1])).Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrKeyDeleted) {
		t.Errorf("got %v, want ErrKeyDeleted: a candidate whose key is gone was elected", err)
	}
}
