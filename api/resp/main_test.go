package resp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/embedded"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/redis"
	"github.com/fencegate/fencegate/proxy/redis/throwaway"
)

const prefix = "/fencegate/elections"

var (
	etcdEndpoints []string
	redisServer   *throwaway.Server
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fencegate-resp-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	goWorkerDir = dir + "/go"
	etcd, err := embedded.Start(ctx, embedded.Config{Dir: dir + "/etcd", NoFsync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer etcd.Close()
	redisServer, err = throwaway.Start(ctx, throwaway.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer redisServer.Close()
	etcdEndpoints = etcd.Endpoints()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}

// env is one RESP listener in front of the throwaway Redis, with its own
// pipeline (as serve wires it).
type env struct {
	addr  string
	port  string
	cli   *clientv3.Client
	admin *goredis.Client // straight to Redis, for checking what is stored
	srv   *resp.Server
	terms *election.Watcher // the listener's
}

func newEnv(t *testing.T, cfg resp.Config) *env {
	t.Helper()
	return newEnvWith(t, cfg, proxy.Options{})
}

// newEnvWith is newEnv with the pipeline's policy and authentication
// options.
func newEnvWith(t *testing.T, cfg resp.Config, opts proxy.Options) *env {
	t.Helper()
	return newEnvRedis(t, cfg, opts, redis.DefaultConfig())
}

// newEnvRedis is newEnvWith with the Redis backend's configuration.
func newEnvRedis(t *testing.T, cfg resp.Config, opts proxy.Options, rcfg redis.Config) *env {
	t.Helper()
	return newEnvAt(t, cfg, opts, rcfg, redisServer.Addr())
}

// newEnvAt is newEnvRedis in front of the Redis server at addr.
func newEnvAt(t *testing.T, cfg resp.Config, opts proxy.Options, rcfg redis.Config, addr string) *env {
	t.Helper()
	ctx := t.Context()
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	w, err := election.NewWatcher(cli, election.WatcherConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = w.Run(wctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	for deadline := time.Now().Add(10 * time.Second); !w.Synced(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("watch not synced")
		}
	}
	rd, err := redis.Open(ctx, addr, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	opts.Terms, opts.Redis = w, rd
	gw, err := proxy.New(proxy.DefaultConfig(), opts)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := resp.New(gw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer c()
		_ = srv.Shutdown(sctx)
		<-done
	})
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	return &env{addr: lis.Addr().String(), port: port, cli: cli, admin: plainClient(t, addr, "", ""), srv: srv, terms: w}
}

// plainClient is a go-redis client as a user would configure it.
func plainClient(t *testing.T, addr, user, pass string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{
		Addr: addr, Username: user, Password: pass, MaxRetries: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var seq atomic.Int64

// unique returns a fence name no other test uses.
func unique(prefix string) string { return fmt.Sprintf("%s%d", prefix, seq.Add(1)) }

// lead campaigns in election fence and returns the leader's token and a
// function that resigns.
func (e *env) lead(t *testing.T, fence string) (uint64, func()) {
	t.Helper()
	s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	el := concurrency.NewElection(s, prefix+"/"+fence)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := el.Campaign(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	return uint64(el.Rev()), func() { _ = el.Resign(t.Context()) }
}

// succession makes a leader of fence resign after writing with a client,
// and a new one take over: it returns the old (zombie) token and the new,
// once the listener's watch has delivered the new term (before, the old
// token would be refused as ended, not as stale).
func (e *env) succession(t *testing.T, fence string) (old, cur uint64) {
	t.Helper()
	old, resign := e.lead(t, fence)
	resign()
	cur, _ = e.lead(t, fence)
	for deadline := time.Now().Add(10 * time.Second); e.terms.Term(fence).Rev != int64(cur); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the listener's watch did not deliver term %d of %s", cur, fence)
		}
	}
	return old, cur
}

// stored reads key straight from Redis; "" when missing.
func (e *env) stored(t *testing.T, key string) string {
	t.Helper()
	v, err := e.admin.Get(t.Context(), key).Result()
	if errors.Is(err, goredis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}
