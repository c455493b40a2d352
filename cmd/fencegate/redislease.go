package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/redislease"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/redis"
)

// redisLeaseConfig is where the redis-lease term source reads leases.
type redisLeaseConfig struct {
	// Addr is the Redis holding the leases; empty: --redis-addr's.
	Addr           string
	KeyPattern     string
	CounterPattern string
}

func (c *redisLeaseConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "redis-lease-addr", c.Addr, "Redis host:port (or Unix socket path) holding the leases of fences routed to redis-lease (default: --redis-addr's; same credentials and TLS)")
	fs.StringVar(&c.KeyPattern, "redis-lease-key", c.KeyPattern, "`pattern` of a redis-lease fence's lease key (SET key id NX PX ttl), %s the fence name")
	fs.StringVar(&c.CounterPattern, "redis-lease-counter", c.CounterPattern, "`pattern` of a redis-lease fence's counter key (INCR on each acquisition: the token), %s the fence name")
}

func (c *redisLeaseConfig) validate() error {
	return redislease.ValidatePatterns("--redis-lease-key", c.KeyPattern, "--redis-lease-counter", c.CounterPattern)
}

// routesKind reports whether a route names kind.
func routesKind(routes []election.Route, kind string) bool {
	return slices.ContainsFunc(routes, func(r election.Route) bool { return r.Kind == kind })
}

// redisLease is the redis-lease source as serve wires it.
type redisLease struct {
	src    *redislease.Source
	client *goredis.Client
	addr   string
	// sameRedis: the leases are in the Redis backend's own Redis, so its
	// script checks them.
	sameRedis bool
	// kindOf names a fence's source; set once the router is made, before
	// any write.
	kindOf func(fence string) string
}

// openRedisLease connects to the leases' Redis (the backend's when
// --redis-lease-addr is not set) with the backend's credentials and TLS,
// and checks it answers.
func openRedisLease(ctx context.Context, cfg serveConfig, log *slog.Logger) (*redisLease, error) {
	addr := cfg.RedisLease.Addr
	if addr == "" {
		addr = cfg.RedisAddr
	}
	if addr == "" {
		return nil, fmt.Errorf("--term-sources routes fences to %s: set --redis-lease-addr or --redis-addr", election.SourceRedisLease)
	}
	if err := cfg.Deps.applyRedis(&cfg.Redis); err != nil {
		return nil, err
	}
	if err := redis.CheckAddr(addr, cfg.Redis.TLS); err != nil {
		return nil, fmt.Errorf("redis-lease: %w", err)
	}
	client := leaseClient(cfg, addr)
	pctx, cancel := context.WithTimeout(ctx, cfg.Redis.DialTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis-lease: cannot reach %s: %w", addr, err)
	}
	src, err := redislease.New(client, redislease.Config{
		KeyPattern: cfg.RedisLease.KeyPattern, CounterPattern: cfg.RedisLease.CounterPattern, Logger: log,
	})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	same := addr == cfg.RedisAddr
	if !same && cfg.RedisAddr != "" {
		same = sameServer(pctx, client, cfg, log)
	}
	return &redisLease{src: src, client: client, addr: addr, sameRedis: same}, nil
}

func leaseClient(cfg serveConfig, addr string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{
		Addr: addr, Protocol: 2, MaxRetries: -1,
		DialTimeout: cfg.Redis.DialTimeout, ReadTimeout: cfg.Redis.ReadTimeout, WriteTimeout: cfg.Redis.WriteTimeout,
		ContextTimeoutEnabled: true,
		TLSConfig:             cfg.Redis.TLS, Username: cfg.Redis.Username, Password: cfg.Redis.Password,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// sameServer reports whether the leases' Redis, reached at another
// address than --redis-addr, is the backend's Redis all the same
// (localhost and 127.0.0.1, a DNS name and its address): the same run_id
// in INFO server. When it cannot tell, it says no: the lease is then read
// before each write, as for a Redis of its own, and its keys are refused
// in writes either way.
func sameServer(ctx context.Context, leases *goredis.Client, cfg serveConfig, log *slog.Logger) bool {
	backend := leaseClient(cfg, cfg.RedisAddr)
	defer backend.Close()
	a, errA := runID(ctx, leases)
	b, errB := runID(ctx, backend)
	if err := cmp.Or(errA, errB); err != nil {
		log.Info("redis-lease: cannot tell whether --redis-lease-addr is the backend's Redis; the lease is read before each write",
			"redis-lease-addr", cfg.RedisLease.Addr, "redis-addr", cfg.RedisAddr, "err", err)
		return false
	}
	return a == b
}

// runID is a Redis server's run_id (INFO server): a random name for the
// life of its process.
func runID(ctx context.Context, c *goredis.Client) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(info) {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok && id != "" {
			return id, nil
		}
	}
	return "", errors.New("INFO server has no run_id")
}

func (l *redisLease) isLease(fence string) bool {
	return l.kindOf != nil && l.kindOf(fence) == election.SourceRedisLease
}

// leases names the lease keys of a fence, which the Redis backend refuses
// in writes, and checks in its script when the leases are in its Redis.
func (l *redisLease) leases() func(string) (redis.LeaseKeys, bool) {
	return func(fence string) (redis.LeaseKeys, bool) {
		if !l.isLease(fence) {
			return redis.LeaseKeys{}, false
		}
		k := l.src.Keys(fence)
		return redis.LeaseKeys{Lease: k.Lease, Counter: k.Counter, Elsewhere: !l.sameRedis}, true
	}
}

// readBeforeUse: every other write to a lease fence reads the lease first.
func (l *redisLease) readBeforeUse(backend, fence string) bool {
	if !l.isLease(fence) {
		return false
	}
	return backend == proxy.BackendPostgres || !l.sameRedis
}
