package pgwire_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/api/pgwire"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/postgres"
)

// Red team, round 9: what the PostgreSQL listener's metrics tell an
// operator must be what fencegate and the database did.

// rt9Clock is the pipeline's clock, moved by the test only.
type rt9Clock struct{ ns atomic.Int64 }

func (c *rt9Clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *rt9Clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// rt9Env is newEnv with a metrics registry and a clock of the test's.
func rt9Env(t *testing.T) (*env, *prometheus.Registry, *rt9Clock) {
	t.Helper()
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
	pg, err := postgres.Open(ctx, gatewayDSN, postgres.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	reg := prometheus.NewRegistry()
	clk := &rt9Clock{}
	clk.ns.Store(time.Now().UnixNano())
	gw, err := proxy.New(proxy.DefaultConfig(), proxy.Options{Terms: w, Postgres: pg, Registerer: reg, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := pgwire.New(gw, pgwire.Config{PostgresDSN: pgServer.DSN(), Sessions: pg})
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
	e := newEnv(t, pgwire.Config{}) // for its admin connection and table helpers
	e2 := *e
	e2.addr, e2.cli, e2.srv = lis.Addr().String(), cli, srv
	_, e2.port, _ = net.SplitHostPort(e2.addr)
	return &e2, reg, clk
}

func rt9Histogram(t *testing.T, reg *prometheus.Registry, backend, outcome string) (count uint64, sum float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fencegate_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["backend"] == backend && l["outcome"] == outcome {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

// TestRedTeam9TransactionThinkTimeIsNotWriteLatency: a client that holds
// a transaction open while it works (BEGIN, INSERT, ten seconds of its
// own, COMMIT) has fencegate and the database answer quickly every time.
// fencegate_request_duration_seconds is "time to answer a fenced write",
// and FencegateSlowWrites (p99 of accepted above 250 ms) sends the
// operator to "the backend is slow or overloaded, or the pool too small":
// the client's own time between statements must not be counted as the
// write's latency. The pipeline's clock is the test's: only the ten
// seconds the test moves it can show.
func TestRedTeam9TransactionThinkTimeIsNotWriteLatency(t *testing.T) {
	ctx := t.Context()
	e, reg, clk := rt9Env(t)
	e.table(t, "rt9think")
	tok, _ := e.lead(t, "rt9think")
	c := e.connect(t, "rt9think", tok)
	for _, sql := range []string{"BEGIN", "INSERT INTO rt9think (v) VALUES ('x')"} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	clk.advance(10 * time.Second) // the client's own work, transaction open
	if _, err := c.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	n, sum := rt9Histogram(t, reg, "postgres", "accepted")
	if n != 1 {
		t.Fatalf("accepted postgres writes observed: %d, want 1", n)
	}
	if sum >= 1 {
		t.Errorf("fencegate_request_duration_seconds{backend=postgres,outcome=accepted} observed %.1fs for a transaction fencegate and the database answered at once: the client's time with the transaction open is counted as write latency (FencegateSlowWrites fires for healthy traffic and blames the backend)", sum)
	}
}
