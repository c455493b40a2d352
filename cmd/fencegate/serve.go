package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	goredis "github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/reflection"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/api/pgwire"
	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/pgterm"
	"github.com/fencegate/fencegate/election/zookeeper"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/coalesce"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/proxy/redis"
	"github.com/fencegate/fencegate/tokens"
)

const serveSummary = `Serve the gateway: watch elections in etcd, accept fenced writes over gRPC
and HTTP/JSON, and apply them to PostgreSQL and/or Redis. At least one backend
is required.`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	holdSIGHUP()
	cfg := defaultServeConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.register(fs, true)
	if err := parseFlags(fs, args, stdout, stderr, serveSummary); err != nil {
		return err
	}
	log, err := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return usage(err)
	}
	return serve(ctx, cfg, log, nil)
}

// newLogger builds the process logger.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: durationsAsText}
	var log *slog.Logger
	switch format {
	case "text":
		log = slog.New(slog.NewTextHandler(w, opts))
	case "json":
		log = slog.New(slog.NewJSONHandler(w, opts))
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
	goredis.SetLogger(goRedisLog{log})
	return log, nil
}

// goRedisLog takes go-redis's own log lines (process-wide: the library has
// one logger) into the process log at debug level, instead of bare lines
// on standard error. What they report, a failed dial say, reaches the
// user as fencegate's own error.
type goRedisLog struct{ log *slog.Logger }

func (l goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "go-redis")
}

// serve runs the gateway until ctx is cancelled, then drains and stops.
// started, when not nil, is called once both listeners are up.
func serve(ctx context.Context, cfg serveConfig, log *slog.Logger, started func()) error {
	// SIGHUP asks for a reload; one that comes while starting is acted on
	// once serving, one while draining is dropped (holdSIGHUP).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.PostgresDSN == "" && cfg.RedisAddr == "" {
		return usagef("no backend configured: set --postgres-dsn or --redis-addr (or FENCEGATE_POSTGRES_DSN, FENCEGATE_REDIS_ADDR)")
	}
	for _, l := range []struct{ flag, addr, needs, backend, what string }{
		{"--pg-listen-addr", cfg.PgListenAddr, "--postgres-dsn", cfg.PostgresDSN, "the database"},
		{"--pg-unix-socket-dir", cfg.PgUnixSocketDir, "--postgres-dsn", cfg.PostgresDSN, "the database"},
		{"--redis-listen-addr", cfg.RedisListenAddr, "--redis-addr", cfg.RedisAddr, "the Redis"},
		{"--redis-unix-socket", cfg.RedisUnixSocket, "--redis-addr", cfg.RedisAddr, "the Redis"},
	} {
		if l.addr != "" && l.backend == "" {
			return usagef("%s needs %s: %s its clients reach", l.flag, l.needs, l.what)
		}
	}

	reg := prometheus.NewRegistry()
	sec, err := newSecurity(cfg.Security, cfg.Insecure, log, reg)
	if err != nil {
		return err
	}
	defer sec.close()

	var etcd *clientv3.Client
	if !cfg.withoutEtcd() {
		etcd, err = dialEtcd(ctx, cfg)
		if err != nil {
			return err
		}
		defer etcd.Close()
	}
	// The postgres-term source and the check its fences' writes run in
	// the database; both are set before anything is served.
	var (
		pgTerms   *pgterm.Source
		termCheck postgres.TermCheck
		router    *election.Router
	)
	if cfg.routesTo(election.SourcePostgresTerm) {
		if cfg.PostgresDSN == "" {
			return usagef("--term-sources routes fences to postgres-term, which needs --postgres-dsn: the database of the advisory locks and the term table")
		}
		cfg.Postgres.TermCheck = func(fence string) (postgres.TermCheck, bool) {
			if router.KindOf(fence) == election.SourcePostgresTerm {
				return termCheck, true
			}
			return postgres.TermCheck{}, false
		}
	}

	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := proxy.Options{Logger: log, Registerer: reg, Protocol: api.ProtocolOf}
	var lease *redisLease
	if routesKind(cfg.routes, election.SourceRedisLease) {
		if lease, err = openRedisLease(ctx, cfg, log); err != nil {
			return err
		}
		defer lease.client.Close()
		cfg.Redis.Leases = lease.leases()
		opts.ReadBeforeUse = lease.readBeforeUse
	}
	var pg *postgres.Backend
	if cfg.PostgresDSN != "" {
		pg, err = postgres.Open(ctx, cfg.PostgresDSN, cfg.Postgres)
		if err != nil {
			return err
		}
		defer closeWithin(log, "postgres", backendCloseTimeout, pg.Close)
		if cfg.PostgresMigrateDSN != "" {
			if err := postgres.MigrateDSN(ctx, cfg.PostgresMigrateDSN, pg.User()); err != nil {
				return err
			}
		}
		if err := pg.CheckRole(ctx, cfg.Insecure); err != nil {
			return err
		}
		opts.Postgres = pg
		registerBatchMetrics(reg, "postgres", pg.Stats)
	}
	if cfg.Postgres.TermCheck != nil {
		pcfg := cfg.PostgresTerm
		pcfg.DSN, pcfg.Logger = cfg.PostgresDSN, log
		pgTerms, err = pgterm.Open(ctx, pcfg)
		if err != nil {
			return err
		}
		defer pgTerms.Close()
		if termCheck, err = postgres.NewTermCheck(pgTerms.Table(), pgTerms.LockKey()); err != nil {
			return err
		}
	}
	if cfg.RedisAddr != "" {
		if err := cfg.Deps.applyRedis(&cfg.Redis); err != nil {
			return err
		}
		rd, err := redis.Open(ctx, cfg.RedisAddr, cfg.Redis)
		if err != nil {
			return err
		}
		defer rd.Close()
		opts.Redis = rd
		registerBatchMetrics(reg, "redis", rd.Stats)
	}

	err = sec.loadPolicy(cfg.Security, log, reg, func(p *policy.Policy) error {
		if pg == nil {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := pg.CheckRoles(cctx, p.Roles())
		if errors.Is(err, postgres.ErrRolesUnsafe) {
			return policy.Refused(err)
		}
		// PostgreSQL did not answer: the policy store tries the file again.
		return err
	})
	if err != nil {
		return err
	}
	opts.AuthRequired = sec.authn.Required()
	if sec.policy != nil {
		opts.Policy = sec.policy
	}
	if sec.audit != nil {
		opts.Audit = sec.audit
	}

	termChanged := func(old, cur election.Term) {
		log.Info("term changed", "election", cur.Election, "term", cur.Rev, "leader", cur.Leader,
			"previous_term", old.Rev, "has_leader", cur.HasLeader())
	}
	var watcher *election.Watcher
	var etcdSource election.Source // nil without etcd: a nil *Watcher is not
	if etcd != nil {
		watcher, err = election.NewWatcher(etcd, election.WatcherConfig{
			Prefix:   cfg.ElectionPrefix,
			Logger:   log,
			OnChange: termChanged,
		})
		if err != nil {
			return err
		}
		etcdSource = watcher
		opts.Terms = watcher
	}

	others := map[string]election.Source{}
	var zkSource *zookeeper.Source
	if cfg.routesTo(election.SourceZooKeeper) {
		zkSource, err = zookeeper.New(zookeeper.Config{
			Servers:        cfg.zooKeeperServers(),
			Root:           cfg.ZooKeeperRoot,
			SessionTimeout: cfg.ZooKeeperSessionTimeout,
			Logger:         log,
			OnChange:       termChanged,
		})
		if err != nil {
			return err
		}
		defer zkSource.Close()
		others[election.SourceZooKeeper] = zkSource
	}
	if lease != nil {
		others[election.SourceRedisLease] = lease.src
	}
	if pgTerms != nil {
		others[election.SourcePostgresTerm] = pgTerms
	}
	if len(cfg.routes) > 0 || watcher == nil {
		router, err = election.NewRouter(etcdSource, cfg.routes, others)
		if err != nil {
			return err
		}
		opts.Terms = router
		if lease != nil {
			lease.kindOf = router.KindOf
		}
	}
	if pgTerms != nil {
		opts.RedisRefuses = func(fence string) string {
			if router.KindOf(fence) == election.SourcePostgresTerm {
				return "fence " + fence + " takes its terms from postgres-term, which only PostgreSQL writes can check in the write itself: write to Redis under a fence of another source"
			}
			return ""
		}
	}
	var resets *election.Resets
	if etcd != nil {
		resets = election.NewResets(etcd, "", log)
		opts.Resets = resets
	}
	gw, err := proxy.New(cfg.Proxy, opts)
	if err != nil {
		return err
	}
	if resets != nil {
		// Resets on other replicas lower what this one remembers of a
		// fence. Least privilege may leave fencegate read access to the
		// elections only: resets then lower the replica that served them.
		rctx, stopResets := context.WithCancel(ctx)
		defer stopResets()
		resetsDone, err := resets.Start(rctx, func(fence string, mark int64) {
			if gw.LowerLocal(fence, tokens.Token(mark)) {
				log.Warn("fence reset by another replica: term lowered", "fence", fence, "high_water", mark)
			} else {
				log.Warn("fence reset by another replica", "fence", fence, "high_water", mark)
			}
		})
		if err != nil {
			log.Warn("fence resets made on other replicas will not reach this one (grant fencegate readwrite on the prefix "+election.DefaultResetPrefix+")", "err", err)
		} else {
			defer func() { stopResets(); <-resetsDone }()
		}
	}
	srv := api.NewServer(gw, cfg.MaxBodyBytes)

	// The listeners opened so far: closed on return until the servers
	// take them over.
	var opened []net.Listener
	serving := false
	defer func() {
		if serving {
			return
		}
		for _, l := range opened {
			l.Close()
		}
	}()
	listen := func(flag, network, addr string) (net.Listener, error) {
		var lis net.Listener
		var err error
		if network == "unix" {
			lis, err = listenUnix(addr)
		} else {
			lis, err = net.Listen(network, addr)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		opened = append(opened, lis)
		return lis, nil
	}
	grpcLis, err := listen("--grpc-addr", "tcp", cfg.GRPCAddr)
	if err != nil {
		return err
	}
	httpLis, err := listen("--http-addr", "tcp", cfg.HTTPAddr)
	if err != nil {
		return err
	}

	var pgs *pgwire.Server
	var pgLis, pgUnix net.Listener
	if cfg.PgListenAddr != "" || cfg.PgUnixSocketDir != "" {
		pgs, err = pgwire.New(gw, pgwire.Config{
			PostgresDSN:    cfg.PostgresDSN,
			TLS:            pgwire.TLSFrom(sec.tls.Config()),
			Insecure:       cfg.Insecure,
			MaxFenceName:   cfg.Proxy.MaxFenceName,
			MaxConnections: cfg.MaxClientConns,
			Logger:         log,
			Sessions:       pg,
		})
		if err != nil {
			return err
		}
		port := defaultPgSocketPort
		if cfg.PgListenAddr != "" {
			if pgLis, err = listen("--pg-listen-addr", "tcp", cfg.PgListenAddr); err != nil {
				return err
			}
			_, port, _ = net.SplitHostPort(pgLis.Addr().String())
		}
		if cfg.PgUnixSocketDir != "" {
			if pgUnix, err = listen("--pg-unix-socket-dir", "unix", filepath.Join(cfg.PgUnixSocketDir, ".s.PGSQL."+port)); err != nil {
				return err
			}
		}
		registerConnMetrics(reg, proxy.ProtocolPgwire, pgs.Connections)
	}

	var rs *resp.Server
	var redisLis, redisUnix net.Listener
	if cfg.RedisListenAddr != "" || cfg.RedisUnixSocket != "" {
		rs, err = resp.New(gw, resp.Config{
			TLS:          sec.tls.Config(),
			MaxFenceName: cfg.Proxy.MaxFenceName,
			MaxQueued:    cfg.Proxy.MaxStatements,
			// A larger value is refused by the backend anyway; past it the
			// listener stops reading.
			MaxBulkBytes:    cfg.Redis.MaxValueBytes,
			MaxCommandBytes: max(8<<20, cfg.Redis.MaxValueBytes),
			MaxConnections:  cfg.MaxClientConns,
			Logger:          log,
		})
		if err != nil {
			return err
		}
		if cfg.RedisListenAddr != "" {
			if redisLis, err = listen("--redis-listen-addr", "tcp", cfg.RedisListenAddr); err != nil {
				return err
			}
		}
		if cfg.RedisUnixSocket != "" {
			if redisUnix, err = listen("--redis-unix-socket", "unix", cfg.RedisUnixSocket); err != nil {
				return err
			}
		}
		registerConnMetrics(reg, proxy.ProtocolRESP, rs.Connections)
	}

	gopts := append(api.ServerOptions(cfg.MaxBodyBytes),
		grpc.ChainUnaryInterceptor(sec.authn.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(sec.authn.StreamServerInterceptor(), reflectionBounds(sec.authn.Required())),
	)
	if tc := sec.tls.Config(); tc != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tc)))
		httpLis = tls.NewListener(httpLis, tc)
	}
	gs := grpc.NewServer(gopts...)
	srv.Register(gs)
	reflection.Register(gs)

	ready := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if watcher != nil {
			if !watcher.Synced() {
				return errors.New("election watch not synced with etcd")
			}
			if _, err := etcd.Get(ctx, "health", clientv3.WithCountOnly()); err != nil {
				return fmt.Errorf("etcd: %w", err)
			}
		}
		if zkSource != nil && !zkSource.Connected() {
			return errors.New("no ZooKeeper session (--zookeeper-servers)")
		}
		if lease != nil {
			if err := lease.client.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("redis-lease %s: %w", lease.addr, err)
			}
		}
		return gw.Ready(ctx)
	}
	readiness := newReadiness(reg, log, sec.authn.Required(), ready)
	readiness.register(gs)
	opsCfg := api.HTTPConfig{
		Ready:   readiness.Check,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
	}
	handler, err := srv.HTTPHandler(ctx, opsCfg)
	if err != nil {
		return err
	}
	// Outermost, so nothing behind it sees a bearer secret or a caller
	// it did not verify.
	hs := api.NewHTTPServer(sec.authn.HTTPMiddleware(handler), cfg.HTTPServer)
	// net/http logs each failed TLS handshake; anyone reaching the port
	// could fill the log with them. Debug level, and in the log's format.
	hs.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)

	metricsLis, err := listenMetricsAddr(cfg.MetricsAddr)
	if err != nil {
		return err
	}
	if metricsLis != nil {
		opened = append(opened, metricsLis)
	}

	g, gctx := errgroup.WithContext(ctx)
	if cfg.PprofAddr != "" {
		ps, err := servePprof(gctx, g, cfg.PprofAddr)
		if err != nil {
			return err
		}
		log.Info("serving pprof", "addr", ps)
	}
	serving = true
	metricsAddr := ""
	if metricsLis != nil {
		metricsAddr = serveMetricsAddr(gctx, g, metricsLis, api.OpsHandler(opsCfg))
	}
	// The term sources follow the terms until the drain below has ended:
	// a write it lets finish must still be refused, and an open
	// transaction of the PostgreSQL listener ended, when its term ends
	// meanwhile. A source that fails still ends gctx, and with it serve.
	termsCtx, stopTerms := context.WithCancel(context.WithoutCancel(gctx))
	defer stopTerms()
	if watcher != nil {
		g.Go(func() error { return watcher.Run(termsCtx) })
	}
	if zkSource != nil {
		g.Go(func() error { return zkSource.Run(termsCtx) })
	}
	if lease != nil {
		g.Go(func() error { _ = lease.src.Run(termsCtx); return nil })
	}
	if pgTerms != nil {
		g.Go(func() error { return pgTerms.Run(termsCtx) })
	}
	if sec.policy != nil {
		g.Go(func() error { return sec.policy.Run(gctx) })
	}
	g.Go(func() error {
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-hup:
				sec.reload(log)
			}
		}
	})
	g.Go(func() error { return readiness.run(gctx, readinessInterval) })
	g.Go(func() error {
		// ErrServerStopped: shutdown began before Serve did (a signal
		// right at start), not a failure.
		if err := gs.Serve(grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("grpc: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := hs.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	if pgs != nil {
		serveOn(g, "pg listener", pgs.Serve, pgwire.ErrServerClosed, pgLis, pgUnix)
	}
	if rs != nil {
		serveOn(g, "redis listener", rs.Serve, resp.ErrServerClosed, redisLis, redisUnix)
	}
	g.Go(func() error {
		defer stopTerms()
		<-gctx.Done()
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		done := make(chan struct{})
		go func() { gs.GracefulStop(); close(done) }()
		pgDone := make(chan struct{})
		go func() {
			// Idle sessions end now, the others when their transaction does.
			if pgs != nil {
				_ = pgs.Shutdown(sctx)
			}
			close(pgDone)
		}()
		redisDone := make(chan struct{})
		go func() {
			// Idle connections end now, the others once they have answered
			// what they read.
			if rs != nil {
				_ = rs.Shutdown(sctx)
			}
			close(redisDone)
		}()
		_ = hs.Shutdown(sctx)
		<-pgDone
		<-redisDone
		drained := true
		select {
		case <-done:
		case <-sctx.Done():
			gs.Stop()
		}
		if sctx.Err() != nil {
			// Some listener gave up on what it was still serving.
			drained = false
		}
		log.Info("stopped serving", "drained", drained)
		return nil
	})
	log.Info("fencegate serving", "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(),
		"pg", addrOf(pgLis), "pg_unix", addrOf(pgUnix), "resp", addrOf(redisLis), "resp_unix", addrOf(redisUnix), "metrics", metricsAddr,
		"etcd", etcdLogValue(cfg), "election_prefix", cfg.ElectionPrefix, "term_sources", cfg.TermSources,
		"postgres", opts.Postgres != nil, "redis", opts.Redis != nil, "tls", sec.tls != nil,
		"authentication", opts.AuthRequired, "policy", cfg.Security.PolicyFile, "policy_mode", cfg.Security.PolicyMode,
		"version", version())
	if started != nil {
		started()
	}
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// etcdLogValue is what the start line says of etcd.
func etcdLogValue(cfg serveConfig) string {
	if cfg.withoutEtcd() {
		return "none: running without etcd, fences --term-sources does not route have no term (UNKNOWN_TERM)"
	}
	return cfg.EtcdEndpoints
}

// dialEtcd connects to etcd and checks it answers, so a wrong endpoint is
// one clear line at start rather than a hang.
func dialEtcd(ctx context.Context, cfg serveConfig) (*clientv3.Client, error) {
	tlsCfg, err := cfg.Deps.etcdTLS()
	if err != nil {
		return nil, err
	}
	if err := cfg.Deps.checkEtcdEndpoints(cfg.endpoints(), tlsCfg != nil, cfg.Insecure); err != nil {
		return nil, usage(err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.endpoints(),
		DialTimeout: cfg.EtcdDialTimeout,
		Context:     ctx,
		Logger:      zap.NewNop(),
		TLS:         tlsCfg,
		Username:    cfg.Deps.EtcdUser,
		Password:    cfg.Deps.EtcdPassword,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", cfg.EtcdEndpoints, explainEtcd(ctx, cfg.endpoints(), tlsCfg, cfg.EtcdDialTimeout, err))
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.EtcdDialTimeout)
	defer cancel()
	if _, err := cli.Get(cctx, "health", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		if errors.Is(err, rpctypes.ErrPermissionDenied) {
			return nil, cfg.Deps.etcdDenied(cfg.EtcdEndpoints, err)
		}
		err = explainEtcd(ctx, cfg.endpoints(), tlsCfg, cfg.EtcdDialTimeout, err)
		if errors.Is(err, context.DeadlineExceeded) {
			// clientv3's whole account of an endpoint that never answers.
			return nil, fmt.Errorf("etcd at %s is unreachable: no answer within --etcd-dial-timeout %v (check --etcd-endpoints, or raise --etcd-dial-timeout)", cfg.EtcdEndpoints, cfg.EtcdDialTimeout)
		}
		return nil, fmt.Errorf("etcd at %s is unreachable: %w", cfg.EtcdEndpoints, err)
	}
	return cli, nil
}

// registerConnMetrics exports a drop-in listener's client connections
// and its refusals at --max-client-conns, labelled with its protocol.
func registerConnMetrics(reg prometheus.Registerer, protocol string, conns func() (int64, uint64)) {
	labels := prometheus.Labels{"protocol": protocol}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "fencegate_client_connections",
			Help:        "Client connections open on a drop-in listener (--pg-listen-addr, --redis-listen-addr).",
			ConstLabels: labels,
		}, func() float64 { open, _ := conns(); return float64(open) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "fencegate_client_connections_refused_total",
			Help:        "Client connections a drop-in listener refused at --max-client-conns.",
			ConstLabels: labels,
		}, func() float64 { _, refused := conns(); return float64(refused) }),
	)
}

// registerBatchMetrics exports how many writes share a backend round trip:
// rate(writes) / rate(round trips) is the mean batch. Writes wait for a
// slot, and so share one, only while all of the pool's are busy; a mean near
// 1 under load says the pool (--postgres-max-conns, --redis-pool-size) is
// larger than the backend needs.
func registerBatchMetrics(reg prometheus.Registerer, backend string, stats func() coalesce.Stats) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fencegate_" + backend + "_round_trips_total",
			Help: "Batches of fenced writes run on a " + backend + " connection, one round trip each once sent.",
		}, func() float64 { return float64(stats().Batches) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fencegate_" + backend + "_batched_writes_total",
			Help: "Fenced writes in those batches (each its own transaction or script run).",
		}, func() float64 { return float64(stats().Calls) }),
	)
}

// serveOn serves each listener of liss that is open, in g; closed is what
// serve returns once its server shuts down.
func serveOn(g *errgroup.Group, what string, serve func(net.Listener) error, closed error, liss ...net.Listener) {
	for _, lis := range liss {
		if lis == nil {
			continue
		}
		g.Go(func() error {
			if err := serve(lis); err != nil && !errors.Is(err, closed) {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		})
	}
}

// addrOf is lis's address, "" for none.
func addrOf(lis net.Listener) string {
	if lis == nil {
		return ""
	}
	return lis.Addr().String()
}

// backendCloseTimeout bounds closing a backend's connections at exit.
const backendCloseTimeout = 2 * time.Second

// closeWithin runs closeFn, waiting for it at most d: a server that
// stopped answering would otherwise hold the exit for as long as the
// client library waits on each of its connections (pgxpool: 15 s).
func closeWithin(log *slog.Logger, what string, d time.Duration, closeFn func()) {
	done := make(chan struct{})
	go func() { closeFn(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		log.Warn("gave up closing the connections of a backend that does not answer", "backend", what, "after", d)
	}
}
