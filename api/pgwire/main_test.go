package pgwire_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/api/pgwire"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/embedded"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/postgres"
	pgthrowaway "github.com/fencegate/fencegate/proxy/postgres/throwaway"
)

const prefix = "/fencegate/elections"

var (
	etcdEndpoints []string
	pgServer      *pgthrowaway.Server
	gatewayDSN    string // fencegate's own login: a fencegate_runtime member, trust
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fencegate-pgwire-test-")
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
	pgServer, err = pgthrowaway.Start(ctx, pgthrowaway.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pgServer.Close()
	gatewayDSN, err = pgServer.RuntimeRole(ctx, "gateway")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The listener's clients log in as worker, which has no fencegate role.
	if _, err = pgServer.ListenerRole(ctx, "worker"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	etcdEndpoints = etcd.Endpoints()
	return m.Run()
}

// env is one fencegate PostgreSQL listener in front of the throwaway
// server, with its own pipeline (as serve wires it).
type env struct {
	addr  string
	port  string
	cli   *clientv3.Client
	admin *pgx.Conn
	srv   *pgwire.Server
}

func newEnv(t *testing.T, cfg pgwire.Config) *env {
	t.Helper()
	return newEnvWith(t, cfg, envOptions{})
}

// envOptions are the pipeline's parts newEnv leaves out.
type envOptions struct {
	// termSources routes fences to term sources as --term-sources does;
	// "" for etcd alone.
	termSources string
	// audit, when set, gets the pipeline's audit records.
	audit proxy.AuditLog
	// poolDSN is fencegate's own login, on the database the listener
	// serves; "" for gatewayDSN.
	poolDSN string
	// proxy are the pipeline's other options (a policy, authentication
	// required), as serve wires them; Terms, Postgres and Audit are the
	// env's.
	proxy proxy.Options
}

func newEnvWith(t *testing.T, cfg pgwire.Config, o envOptions) *env {
	t.Helper()
	// Not cancelled when the test ends: the cleanups below shut down
	// with it, and the watch runs until its own cleanup.
	ctx := context.WithoutCancel(t.Context())
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
	poolDSN := gatewayDSN
	if o.poolDSN != "" {
		poolDSN = o.poolDSN
	}
	pg, err := postgres.Open(ctx, poolDSN, postgres.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	var terms proxy.Terms = w
	if o.termSources != "" {
		routes, err := election.ParseRoutes(o.termSources)
		if err != nil {
			t.Fatal(err)
		}
		if terms, err = election.NewRouter(w, routes, nil); err != nil {
			t.Fatal(err)
		}
	}
	popts := o.proxy
	popts.Terms, popts.Postgres, popts.Audit = terms, pg, o.audit
	gw, err := proxy.New(proxy.DefaultConfig(), popts)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PostgresDSN == "" {
		cfg.PostgresDSN = pgServer.DSN()
	}
	if cfg.Sessions == nil {
		cfg.Sessions = pg
	}
	srv, err := pgwire.New(gw, cfg)
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
		sctx, c := context.WithTimeout(ctx, 5*time.Second)
		defer c()
		_ = srv.Shutdown(sctx)
		<-done
	})
	admin, err := pgx.Connect(ctx, pgServer.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(ctx) })
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	return &env{addr: lis.Addr().String(), port: port, cli: cli, admin: admin, srv: srv}
}

// table creates a fresh table the worker may write.
func (e *env) table(t *testing.T, name string) {
	t.Helper()
	for _, sql := range []string{
		"DROP TABLE IF EXISTS " + name,
		"CREATE TABLE " + name + " (id serial PRIMARY KEY, v text)",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + name + " TO worker",
		"GRANT USAGE, SELECT, UPDATE ON SEQUENCE " + name + "_id_seq TO worker",
	} {
		if _, err := e.admin.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

func (e *env) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := e.admin.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

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

// dsn is the listener's DSN for user with fence and token.
func (e *env) dsn(user, fence string, token uint64) string {
	return fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable&fencegate.fence=%s&fencegate.token=%d", user, e.addr, fence, token)
}

func (e *env) connect(t *testing.T, fence string, token uint64) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), e.dsn("worker", fence, token))
	if err != nil {
		t.Fatalf("connect through fencegate: %v", err)
	}
	t.Cleanup(func() { c.Close(context.WithoutCancel(t.Context())) })
	return c
}

// wantCode checks err is a server error with SQLSTATE code.
func wantCode(t *testing.T, err error, code string) *pgconn.PgError {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("got error %v, want SQLSTATE %s", err, code)
	}
	if pe.Code != code {
		t.Fatalf("got SQLSTATE %s (%s), want %s", pe.Code, pe.Message, code)
	}
	if strings.HasPrefix(code, "FG") && !strings.HasPrefix(pe.Message, "fencegate: ") {
		t.Fatalf("got message %q, want it to start with \"fencegate: \"", pe.Message)
	}
	return pe
}
