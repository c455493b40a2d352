package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fencegate/fencegate/api"
	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/embedded"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/audit"
	"github.com/fencegate/fencegate/proxy/postgres"
	pgthrowaway "github.com/fencegate/fencegate/proxy/postgres/throwaway"
	"github.com/fencegate/fencegate/proxy/redis"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

const prefix = "/fencegate/elections"

// One etcd and one PostgreSQL for the whole package.
var (
	etcdEndpoints []string
	pgDSN         string
	redisAddr     string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fencegate-api-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	etcd, err := embedded.Start(ctx, embedded.Config{Dir: dir + "/etcd", NoFsync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pg, err := pgthrowaway.Start(ctx, pgthrowaway.Options{})
	if err != nil {
		etcd.Close()
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rd, err := redisthrowaway.Start(ctx, redisthrowaway.Options{})
	if err != nil {
		pg.Close()
		etcd.Close()
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	etcdEndpoints, pgDSN, redisAddr = etcd.Endpoints(), pg.DSN(), rd.Addr()
	code := m.Run()
	rd.Close()
	pg.Close()
	etcd.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

func newEtcdClient(tb testing.TB) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// replica is one fencegate, wired as cmd/fencegate wires it, serving gRPC on
// a loopback port and HTTP through httptest.
type replica struct {
	watcher *election.Watcher
	reg     *prometheus.Registry
	grpc    fencegatev1.GatewayClient
	url     string
	stop    context.CancelFunc // stops the watch: the replica's view freezes
	logs    *syncBuffer
}

// startReplica starts a replica with the default configuration. With watch
// false its election watch never runs, so it knows only what its own etcd
// verification reads tell it.
func startReplica(tb testing.TB, watch bool) *replica {
	tb.Helper()
	return startReplicaWith(tb, replicaConfig{watch: watch, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig()})
}

// startUnawareReplica starts a replica with the default configuration
// whose pipeline cannot tell when its watch stops following etcd
// (replicaConfig.unaware).
func startUnawareReplica(tb testing.TB) *replica {
	tb.Helper()
	return startReplicaWith(tb, replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), unaware: true})
}

// replicaConfig is how a test's replica is configured.
type replicaConfig struct {
	watch bool
	proxy proxy.Config
	http  api.HTTPServerConfig
	// routes, when set, route fences to term sources as --term-sources does;
	// others are the sources they name besides etcd and monotonic.
	routes []election.Route
	// others are the sources routes name besides etcd and monotonic.
	others map[string]election.Source
	// redisLeases and readBeforeUse are how serve wires a redis-lease
	// source: the lease checked in the Redis script, or read before use.
	redisLeases   func(fence string) (redis.LeaseKeys, bool)
	readBeforeUse func(backend, fence string) bool
	// redisAddr, when set, is the Redis backend instead of the package's.
	redisAddr string
	// policy, when set, is the replica's policy (callers have no identity).
	policy proxy.Authorizer
	// audit, when set, gets the replica's audit records.
	audit proxy.AuditLog
	// unaware hides from the pipeline whether the watch follows etcd
	// (election.Freshness): stopped, the replica's view is stale without
	// its knowing, as a watch that lags behind etcd is. Its writes are
	// judged by that view, and only the backend's check stands.
	unaware bool
}

// unawareTerms is a term source whose freshness the pipeline cannot see.
type unawareTerms struct{ src proxy.Terms }

func (u unawareTerms) Term(name string) election.Term { return u.src.Term(name) }
func (u unawareTerms) Terms() []election.Term         { return u.src.Terms() }
func (u unawareTerms) Verify(ctx context.Context, name string, token int64) (election.Term, bool, error) {
	return u.src.Verify(ctx, name, token)
}

func startReplicaWith(tb testing.TB, rc replicaConfig) *replica {
	tb.Helper()
	watch := rc.watch
	cli := newEtcdClient(tb)
	w, err := election.NewWatcher(cli, election.WatcherConfig{Prefix: prefix})
	if err != nil {
		tb.Fatalf("watcher: %v", err)
	}
	ctx, cancel := context.WithCancel(tb.Context())
	var wg sync.WaitGroup
	tb.Cleanup(func() { cancel(); wg.Wait() })
	if watch {
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(ctx) }()
		waitFor(tb, "watch synced", w.Synced)
	}

	pg, err := postgres.Open(tb.Context(), pgDSN, postgres.DefaultConfig())
	if err != nil {
		tb.Fatalf("postgres: %v", err)
	}
	tb.Cleanup(pg.Close)
	if err := pg.Migrate(tb.Context()); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	rcfg := redis.DefaultConfig()
	rcfg.Leases = rc.redisLeases
	raddr := redisAddr
	if rc.redisAddr != "" {
		raddr = rc.redisAddr
	}
	rd, err := redis.Open(tb.Context(), raddr, rcfg)
	if err != nil {
		tb.Fatalf("redis: %v", err)
	}
	tb.Cleanup(func() { rd.Close() })
	reg := prometheus.NewRegistry()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	var terms proxy.Terms = w
	if len(rc.routes) > 0 {
		r, err := election.NewRouter(w, rc.routes, rc.others)
		if err != nil {
			tb.Fatal(err)
		}
		terms = r
	}
	if rc.unaware {
		terms = unawareTerms{terms}
	}
	opts := proxy.Options{Terms: terms, Postgres: pg, Redis: rd, Logger: log, Registerer: reg, Policy: rc.policy, ReadBeforeUse: rc.readBeforeUse, Audit: rc.audit}
	var resets *election.Resets
	if watch {
		resets = election.NewResets(cli, prefix+"-resets/", log)
		opts.Resets = resets
	}
	gw, err := proxy.New(rc.proxy, opts)
	if err != nil {
		tb.Fatalf("proxy: %v", err)
	}
	if resets != nil {
		done, err := resets.Start(ctx, func(fence string, mark int64) { gw.LowerLocal(fence, tokens.Token(mark)) })
		if err != nil {
			tb.Fatalf("resets: %v", err)
		}
		tb.Cleanup(func() { cancel(); <-done })
	}
	srv := api.NewServer(gw, 64<<10)

	gs := grpc.NewServer(api.ServerOptions(64 << 10)...)
	srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = gs.Serve(lis) }()
	tb.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })

	h, err := srv.HTTPHandler(ctx, api.HTTPConfig{
		Ready:   func(ctx context.Context) error { return gw.Ready(ctx) },
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	})
	if err != nil {
		tb.Fatal(err)
	}
	// The server cmd/fencegate serves with, limits included.
	hs := httptest.NewUnstartedServer(h)
	hs.Config = api.NewHTTPServer(h, rc.http)
	hs.Start()
	tb.Cleanup(hs.Close)
	return &replica{watcher: w, reg: reg, grpc: fencegatev1.NewGatewayClient(conn), url: hs.URL, stop: cancel, logs: logs}
}

// syncBuffer is a replica's log, safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// leader campaigns in election name the way `etcdctl elect` does and
// returns once elected.
type leader struct {
	session *concurrency.Session
	elec    *concurrency.Election
	token   int64
}

func campaign(tb testing.TB, cli *clientv3.Client, name, value string) *leader {
	tb.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		tb.Fatalf("session: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	e := concurrency.NewElection(s, prefix+"/"+name)
	ctx, cancel := context.WithTimeout(tb.Context(), 10*time.Second)
	defer cancel()
	if err := e.Campaign(ctx, value); err != nil {
		tb.Fatalf("campaign %s: %v", value, err)
	}
	return &leader{session: s, elec: e, token: e.Rev()}
}

func (l *leader) resign(tb testing.TB) {
	tb.Helper()
	if err := l.elec.Resign(tb.Context()); err != nil {
		tb.Fatalf("resign: %v", err)
	}
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func waitTerm(tb testing.TB, r *replica, name string, rev int64) {
	tb.Helper()
	waitFor(tb, fmt.Sprintf("term %d of %s", rev, name), func() bool { return r.watcher.Term(name).Rev == rev })
}

var nonName = regexp.MustCompile(`[^A-Za-z0-9]+`)

// fenceName returns a fence name of its own for the test: the same for
// every call in one run of it, and another in each later run in the same
// process (go test -count=N), whose backends still hold the first run's
// marks and keys.
func fenceName(t *testing.T) string {
	t.Helper()
	base := strings.Trim(nonName.ReplaceAllString(t.Name(), "-"), "-")
	fenceRuns.Lock()
	defer fenceRuns.Unlock()
	r := fenceRuns.byName[base]
	if r.t != t {
		r = fenceRun{t: t, n: r.n + 1}
		fenceRuns.byName[base] = r
	}
	if r.n == 1 {
		return base
	}
	return fmt.Sprintf("%s-run%d", base, r.n)
}

// fenceRuns counts the runs of each test name for fenceName.
var fenceRuns = struct {
	sync.Mutex
	byName map[string]fenceRun
}{byName: map[string]fenceRun{}}

type fenceRun struct {
	t *testing.T
	n int
}

// httpReply is a decoded HTTP answer: the JSON body and, for errors, the
// ErrorInfo reason and metadata.
type httpReply struct {
	code     int
	body     map[string]any
	reason   string
	metadata map[string]any
}

func doHTTP(t *testing.T, method, url, token, body string) httpReply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Fencing-Token", token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := httpReply{code: resp.StatusCode}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		t.Fatalf("%s %s: body %q is not JSON: %v", method, url, raw, err)
	}
	if details, ok := r.body["details"].([]any); ok {
		for _, d := range details {
			d, _ := d.(map[string]any)
			if d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" {
				r.reason, _ = d["reason"].(string)
				r.metadata, _ = d["metadata"].(map[string]any)
			}
		}
	}
	return r
}

func sqlBody(stmts ...string) string {
	var b strings.Builder
	b.WriteString(`{"statements":[`)
	for i, s := range stmts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s)
	}
	b.WriteString(`]}`)
	return b.String()
}

func execHTTP(t *testing.T, r *replica, fence string, token int64, stmts ...string) httpReply {
	t.Helper()
	tok := ""
	if token != 0 {
		tok = fmt.Sprint(token)
	}
	return doHTTP(t, http.MethodPost, r.url+"/v1/fences/"+fence+"/sql", tok, sqlBody(stmts...))
}

// testAudit opens an audit log of the test's own, closed when the test
// ends, and returns it with records: it closes the log (so every record
// is written) and returns them, one per line, and the file's text.
func testAudit(t *testing.T) (alog *audit.Log, records func() (lines []string, raw string)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.log")
	alog, err := audit.Open(path, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = alog.Close() }) // ErrClosed once records ran
	return alog, func() ([]string, string) {
		t.Helper()
		if err := alog.Close(); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n"), string(raw)
	}
}

// runWatcher runs a watcher of the elections on cli until the test ends,
// and waits until it is synced.
func runWatcher(t *testing.T, cli *clientv3.Client) *election.Watcher {
	t.Helper()
	w, err := election.NewWatcher(cli, election.WatcherConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "synced", w.Synced)
	return w
}

// openPostgres opens fencegate's PostgreSQL backend on the package's
// server, migrated, until the test ends.
func openPostgres(t *testing.T) *postgres.Backend {
	t.Helper()
	pg, err := postgres.Open(t.Context(), pgDSN, postgres.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	if err := pg.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return pg
}
