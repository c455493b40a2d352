package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/netfault"
	"github.com/fencegate/fencegate/election/redislease"
	rdthrow "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// The redis-lease source: the workers take the seed's lease (SET NX PX,
// then INCR the counter for the token) in a Redis of the campaign. With
// --backend=redis it is the data's own Redis, so fencegate checks the
// lease inside its fencing script; with --backend=postgres a second
// throwaway Redis, read before every write. Each worker reaches it
// through a cut proxy of its own, so a partition stops its renewals.
func init() {
	sources[election.SourceRedisLease] = chaosSource{
		start:       leaseRedis.start,
		gatewayArgs: leaseRedis.gatewayArgs,
		workerAddr:  leaseRedis.workerAddr,
		leader:      leaseRedis.leader,
		campaign:    campaignLease,
		stop:        leaseRedis.stop,
		ownsKey: func(c *campaign, key string) bool {
			k := leaseKeys(c.cfg.Fence)
			return key == k.Lease || key == k.Counter
		},
	}
}

// leaseRedis is the campaign's side of the source: one campaign a
// process.
var leaseRedis = &leaseCampaign{proxies: map[int]*netfault.Proxy{}}

type leaseCampaign struct {
	mu sync.Mutex
	// own is the second Redis of --backend=postgres; nil with Redis data.
	own  *rdthrow.Server
	addr string
	rdc  *goredis.Client
	// proxies are each worker slot's path to the lease Redis.
	proxies map[int]*netfault.Proxy
}

func (l *leaseCampaign) start(ctx context.Context, c *campaign) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.rd != nil {
		l.addr = c.rd.Addr()
	} else {
		rd, err := rdthrow.Start(ctx, rdthrow.Options{Logf: func(string, ...any) {}})
		if err != nil {
			return err
		}
		l.own, l.addr = rd, rd.Addr()
	}
	l.rdc = goredis.NewClient(&goredis.Options{Addr: l.addr, MaxRetries: -1, Protocol: 2})
	return nil
}

// gatewayArgs route the fence to the lease. With Redis data the leases
// are --redis-addr's own (each replica's backend proxy), so the script
// checks them; otherwise --redis-lease-addr names the second Redis.
func (l *leaseCampaign) gatewayArgs(c *campaign) []string {
	args := []string{"--term-sources=" + c.cfg.Fence + "=" + election.SourceRedisLease}
	if l.own != nil {
		args = append(args, "--redis-lease-addr="+l.addr)
	}
	return args
}

func (l *leaseCampaign) workerAddr(_ *campaign, w *workerSlot) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.proxies[w.idx]
	if !ok {
		var err error
		if p, err = netfault.New(l.addr); err != nil {
			return "", err
		}
		l.proxies[w.idx] = p
		// With the etcd proxies: partition-leader cuts them all, quiesce
		// restores and teardown closes them.
		w.proxies = append(w.proxies, p)
	}
	return p.Addr(), nil
}

func (l *leaseCampaign) leader(ctx context.Context, c *campaign) string {
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	id, err := l.rdc.Get(gctx, leaseKeys(c.cfg.Fence).Lease).Result()
	if err != nil {
		return ""
	}
	return id
}

func (l *leaseCampaign) stop(*campaign) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rdc != nil {
		l.rdc.Close()
		l.rdc = nil
	}
	if l.own != nil {
		l.own.Close()
		l.own = nil
	}
}

// leaseKeys are fencegate's default layout, which the gateways use.
func leaseKeys(fence string) redislease.Keys {
	return redislease.Keys{
		Lease:   fmt.Sprintf(redislease.DefaultKeyPattern, fence),
		Counter: fmt.Sprintf(redislease.DefaultCounterPattern, fence),
	}
}

var (
	leaseRenew   = goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`)
	leaseRelease = goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

// leaseClient is the worker's connection to the lease Redis: one worker a
// process.
var leaseClient struct {
	once sync.Once
	c    *goredis.Client
}

// campaignLease is the seed's lease worker: SET <lease> <id> NX PX <ttl>
// until it succeeds, then INCR <counter>: the token.
func campaignLease(ctx context.Context, w *worker) (term, error) {
	leaseClient.once.Do(func() {
		leaseClient.c = goredis.NewClient(&goredis.Options{
			Addr: w.cfg.SourceAddr, Protocol: 2, MaxRetries: -1,
			DialTimeout: w.cfg.TTL / 3, ReadTimeout: w.cfg.TTL / 3, WriteTimeout: w.cfg.TTL / 3,
		})
	})
	c := leaseClient.c
	k := leaseKeys(w.cfg.Fence)
	for {
		sent := time.Now()
		ok, err := c.SetNX(ctx, k.Lease, w.cfg.ID, w.cfg.TTL).Result()
		if err == nil && ok {
			tok, err := c.Incr(ctx, k.Counter).Result()
			if err != nil {
				// Leading with no token: let it go.
				_ = leaseRelease.Run(context.WithoutCancel(ctx), c, []string{k.Lease}, w.cfg.ID).Err()
				return nil, fmt.Errorf("lease: INCR %s: %w", k.Counter, err)
			}
			return newLeaseTerm(c, k, w.cfg.ID, w.cfg.TTL, tok, sent), nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		sleep(ctx, w.cfg.TTL/10)
	}
}

// leaseTerm holds the lease while it renews it every TTL/3. It is over
// once a renewal fails, or no renewal succeeded within the TTL counted
// from before the last successful one was sent: the lease may have
// expired by then.
type leaseTerm struct {
	c     *goredis.Client
	k     redislease.Keys
	id    string
	ttl   time.Duration
	token int64

	mu    sync.Mutex
	until time.Time // when the lease may expire
	lost  error

	cancel context.CancelFunc
	done   chan struct{}
}

func newLeaseTerm(c *goredis.Client, k redislease.Keys, id string, ttl time.Duration, tok int64, sent time.Time) *leaseTerm {
	ctx, cancel := context.WithCancel(context.Background())
	t := &leaseTerm{c: c, k: k, id: id, ttl: ttl, token: tok, until: sent.Add(ttl), cancel: cancel, done: make(chan struct{})}
	go t.renew(ctx)
	return t
}

func (t *leaseTerm) renew(ctx context.Context) {
	defer close(t.done)
	tick := time.NewTicker(t.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, t.ttl/3)
		n, err := leaseRenew.Run(rctx, t.c, []string{t.k.Lease}, t.id, t.ttl.Milliseconds()).Int()
		cancel()
		t.mu.Lock()
		switch {
		case err == nil && n == 1:
			if t.lost == nil {
				t.until = sent.Add(t.ttl)
			}
		case err == nil:
			t.lost = errors.New("lease: lost (held by another or expired)")
		}
		t.mu.Unlock()
	}
}

func (t *leaseTerm) Token() int64 { return t.token }

func (t *leaseTerm) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost != nil {
		return t.lost
	}
	if time.Now().After(t.until) {
		return errors.New("lease: not renewed within its TTL")
	}
	return nil
}

func (t *leaseTerm) Resign(ctx context.Context) error {
	t.cancel()
	<-t.done
	return leaseRelease.Run(ctx, t.c, []string{t.k.Lease}, t.id).Err()
}
