package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/election"
)

// The statement and key a worker appends its records with. The ledger
// table is created by the orchestrator; id gives commit order (see
// docs/SAFETY.md for why that holds per fence in fenced mode).
const (
	ledgerInsert = "INSERT INTO ledger (fence, worker, token, seq) VALUES ($1, $2, $3, $4)"
	ledgerDDL    = `CREATE TABLE IF NOT EXISTS ledger (
		id     bigserial PRIMARY KEY,
		fence  text   NOT NULL,
		worker text   NOT NULL,
		token  bigint NOT NULL,
		seq    bigint NOT NULL)`
)

// ledgerKey is the Redis list of fence f; the hash tag puts it in the
// fence's slot, as fencegate requires.
func ledgerKey(fence string) string { return "{" + fence + "}:ledger" }

// redisRecord encodes a record as a list element.
func redisRecord(worker string, token, seq int64) string {
	return worker + ":" + strconv.FormatInt(token, 10) + ":" + strconv.FormatInt(seq, 10)
}

type workerConfig struct {
	ID           string
	Fence        string
	Backend      string
	Mode         string
	Etcd         []string
	Gateways     []string
	HTTPGateways []string
	HTTPP        float64
	Protocol     string
	// PgGateways are the replicas' PostgreSQL listeners, PgLoginDSN the
	// pgwire workers' own login (--protocol=pgwire).
	PgGateways []string
	PgLoginDSN string
	// RespGateways are the replicas' RESP listeners (--protocol=resp).
	RespGateways  []string
	PostgresDSN   string
	RedisAddr     string
	History       string
	TTL           time.Duration
	Seed          uint64
	RecklessP     float64
	Interval      time.Duration
	Concurrency   int
	Timeout       time.Duration
	ZombieMin     time.Duration
	ZombieMax     time.Duration
	ElectionPrefx string
	// Source is the election campaigned in (--source), SourceAddr how
	// to reach it when it is not etcd.
	Source     string
	SourceAddr string
	HostileP   float64
	OtherFence string
	// TLS is the worker's own certificate toward the gateways (secure.go);
	// empty: plain TCP. Intruder is a valid certificate that no rule lets
	// write the fence; set, hostile workers also write as the intruder and
	// with no certificate at all.
	TLS, Intruder tlsFiles
}

// writeFunc sends one record and says what became of it.
type writeFunc func(ctx context.Context, token, seq int64) (Outcome, string)

// stmt is one SQL statement of a fenced write; params are strings or
// int64s.
type stmt struct {
	sql    string
	params []any
}

// request is one fenced write: statements for PostgreSQL, commands for
// Redis. simple asks pgwire workers to send the statements as one
// simple-protocol Query string, as they are, rather than in BEGIN ...
// COMMIT (pgwire.go); the other protocols ignore it.
type request struct {
	stmts  []stmt
	cmds   [][]string
	simple bool
}

// sendFunc sends one fenced write and says what became of it.
type sendFunc func(ctx context.Context, token int64, req request) (Outcome, string)

// runWorker campaigns for the fence's election and, while it believes it
// leads (and, when reckless, for a while after), appends records.
func runWorker(ctx context.Context, args []string) error {
	var cfg workerConfig
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.StringVar(&cfg.ID, "id", "", "worker incarnation name, unique in the run")
	fs.StringVar(&cfg.Fence, "fence", "chaos", "fence (and election) name")
	fs.StringVar(&cfg.Backend, "backend", "postgres", "postgres or redis")
	fs.StringVar(&cfg.Mode, "mode", "fenced", "fenced (through fencegate) or control (straight to the backend)")
	etcd := fs.String("etcd", "", "comma-separated etcd endpoints")
	gateways := fs.String("gateways", "", "comma-separated fencegate gRPC addresses")
	httpGateways := fs.String("http-gateways", "", "comma-separated fencegate HTTP addresses")
	fs.Float64Var(&cfg.HTTPP, "http", 0.5, "probability that a fenced write goes over HTTP/JSON rather than gRPC")
	fs.StringVar(&cfg.Protocol, "protocol", protoGRPCHTTP, "grpc, http or grpc+http (the gateways' APIs, --http the chance of HTTP), pgwire (pgx, through --pg-gateways; straight to --pg-login-dsn's database in control mode) or resp (go-redis, through --resp-gateways)")
	respGateways := fs.String("resp-gateways", "", "comma-separated fencegate RESP listener addresses (--protocol=resp)")
	pgGateways := fs.String("pg-gateways", "", "comma-separated fencegate PostgreSQL listener addresses (--protocol=pgwire)")
	fs.StringVar(&cfg.PgLoginDSN, "pg-login-dsn", "", "the pgwire workers' login, as a DSN straight to the database (--protocol=pgwire)")
	fs.StringVar(&cfg.PostgresDSN, "postgres-dsn", "", "PostgreSQL DSN (control mode)")
	fs.StringVar(&cfg.RedisAddr, "redis-addr", "", "Redis address (control mode)")
	fs.StringVar(&cfg.History, "history", "", "history file (JSON lines)")
	fs.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "election lease TTL")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "random seed")
	fs.Float64Var(&cfg.RecklessP, "reckless", 0.6, "probability that a term is led recklessly")
	fs.DurationVar(&cfg.Interval, "interval", 5*time.Millisecond, "pause between writes")
	fs.IntVar(&cfg.Concurrency, "concurrency", 1, "writes in flight at once while leading")
	fs.DurationVar(&cfg.Timeout, "timeout", time.Second, "request timeout (then the outcome is unknown)")
	fs.DurationVar(&cfg.ZombieMin, "zombie-min", 3*time.Second, "shortest time a reckless worker keeps writing after its term is over")
	fs.DurationVar(&cfg.ZombieMax, "zombie-max", 5*time.Second, "longest time a reckless worker keeps writing after its term is over")
	fs.StringVar(&cfg.ElectionPrefx, "election-prefix", election.DefaultPrefix, "election prefix")
	fs.StringVar(&cfg.Source, "source", election.SourceEtcd, "the election to campaign in: "+sourceNames())
	fs.StringVar(&cfg.SourceAddr, "source-addr", "", "how to reach the election, when --source is not etcd")
	fs.Float64Var(&cfg.HostileP, "hostile", 0, "probability that a leading worker sends an attack before a write (fenced mode)")
	fs.StringVar(&cfg.OtherFence, "other-fence", "", "the fence the attacks aim at besides their own")
	for _, f := range []struct {
		prefix, who string
		files       *tlsFiles
	}{{"", "the worker's", &cfg.TLS}, {"intruder-", "the intruder's", &cfg.Intruder}} {
		fs.StringVar(&f.files.CA, f.prefix+"ca-file", "", "CA bundle (PEM) of the gateways' certificate, for "+f.who+" TLS; empty: plain TCP")
		fs.StringVar(&f.files.Cert, f.prefix+"cert-file", "", f.who+" client certificate (PEM)")
		fs.StringVar(&f.files.Key, f.prefix+"key-file", "", "key (PEM) of --"+f.prefix+"cert-file")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	src, err := lookupSource(cfg.Source)
	if err != nil {
		return err
	}
	cfg.Etcd = splitList(*etcd)
	cfg.Gateways = splitList(*gateways)
	cfg.HTTPGateways = splitList(*httpGateways)
	cfg.PgGateways = splitList(*pgGateways)
	cfg.RespGateways = splitList(*respGateways)
	if cfg.ID == "" || cfg.History == "" || len(cfg.Etcd) == 0 {
		return errors.New("worker: --id, --history and --etcd are required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("worker", cfg.ID)

	hist, err := createHistory(cfg.History, cfg.ID, cfg.Fence)
	if err != nil {
		return err
	}
	defer hist.Close()

	write, send, closeWrite, err := newWriter(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeWrite()
	if cfg.HostileP > 0 && send == nil {
		cfg.HostileP = 0 // control mode: attacks are fencegate's to stop (docs/SAFETY.md)
	}
	sendAs := map[string]sendFunc{}
	if cfg.HostileP > 0 && cfg.Intruder.CA != "" {
		for as, files := range map[string]tlsFiles{asIntruder: cfg.Intruder, asStranger: {CA: cfg.TLS.CA}} {
			s, closeSend, err := newSender(cfg, files)
			if err != nil {
				return err
			}
			defer closeSend()
			sendAs[as] = s
		}
	}

	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            cfg.Etcd,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return err
	}
	defer cli.Close()

	w := &worker{
		cfg: cfg, log: log, source: src, hist: hist, write: write, send: send, sendAs: sendAs, cli: cli,
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
		attacks: newAttacker(cfg),
	}
	w.watchPauses(ctx)
	return w.run(ctx)
}

type worker struct {
	cfg   workerConfig
	log   *slog.Logger
	hist  *historyWriter
	write writeFunc
	send  sendFunc // nil in control mode
	// sendAs sends as someone else (asIntruder, asStranger), for attacks.
	sendAs map[string]sendFunc
	cli    *clientv3.Client
	source chaosSource
	rng    *rand.Rand
	seq    atomic.Int64
	// attacks draws the hostile writes (hostile.go); nil when off.
	attacks *attacker

	// longPauses counts the times the process was stopped for longer than
	// its TTL and then continued.
	longPauses atomic.Int64
	lastTick   atomic.Int64
}

// watchPauses notices that the process was stopped (SIGSTOP, or a long GC
// pause) and continued: a tick that comes late by more than the TTL.
func (w *worker) watchPauses(ctx context.Context) {
	w.lastTick.Store(time.Now().UnixNano())
	conts := make(chan os.Signal, 4)
	signal.Notify(conts, syscall.SIGCONT)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		defer signal.Stop(conts)
		check := func() {
			now := time.Now().UnixNano()
			if gap := time.Duration(now - w.lastTick.Swap(now)); gap > w.cfg.TTL {
				w.longPauses.Add(1)
				w.log.Info("resumed after a pause", "pause", gap)
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				check()
			case <-conts:
				check()
			}
		}
	}()
}

func (w *worker) run(ctx context.Context) error {
	for ctx.Err() == nil {
		lead, err := w.source.campaign(ctx, w)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			w.log.Debug("campaign failed", "err", err)
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		w.lead(ctx, lead)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = lead.Resign(rctx)
		cancel()
	}
	return nil
}

// lead writes while the term lasts. A careful term checks Done before every
// write; a reckless one, once the term is known to be over (Done closed, or
// the process was paused past its TTL), keeps writing with the old token
// for a while: the buggy worker fencegate must protect the data from.
func (w *worker) lead(ctx context.Context, lead term) {
	tok := lead.Token()
	reckless := w.rng.Float64() < w.cfg.RecklessP
	_ = w.hist.log(event{Type: evElect, Token: tok})
	w.log.Info("elected", "token", tok, "reckless", reckless)
	pauses0 := w.longPauses.Load()
	var (
		mu          sync.Mutex
		zombieUntil time.Time
	)
	// stop reports whether the term's writing is over, and starts the
	// zombie time of a reckless term once.
	stop := func() (over, done bool) {
		over = lead.Err() != nil || w.longPauses.Load() != pauses0
		if !over {
			return false, false
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case reckless && zombieUntil.IsZero():
			d := w.cfg.ZombieMin + time.Duration(w.rng.Int64N(int64(w.cfg.ZombieMax-w.cfg.ZombieMin)+1))
			zombieUntil = time.Now().Add(d)
			w.log.Info("term over, writing on recklessly", "token", tok, "for", d, "cause", lead.Err())
		case reckless && time.Now().After(zombieUntil):
			return true, true
		case !reckless && lead.Err() != nil:
			return true, true
		}
		return true, false
	}
	// termOver says whether a careful worker steps down after an answer:
	// when told its term is over.
	termOver := func(out Outcome, reason string) bool {
		return !reckless && out == Refused && (reason == "STALE_TOKEN" || reason == "TERM_ENDED")
	}
	loop := func() {
		for ctx.Err() == nil {
			over, done := stop()
			if done {
				return
			}
			// A hostile leader attacks with its own valid token, between
			// its ordinary writes; a zombie's token is refused anyway.
			if !over && w.attacks.now() {
				out, reason, err := w.attack(ctx, tok)
				if err != nil {
					w.log.Error("history", "err", err)
					return
				}
				if termOver(out, reason) {
					return
				}
			}
			seq := w.seq.Add(1)
			if err := w.hist.log(event{Type: evInvoke, Token: tok, Seq: seq, Zombie: over}); err != nil {
				w.log.Error("history", "err", err)
				return
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Timeout)
			out, reason := w.write(rctx, tok, seq)
			cancel()
			_ = w.hist.outcome(seq, out, reason)
			if termOver(out, reason) {
				return
			}
			sleep(ctx, w.cfg.Interval)
		}
	}
	// Concurrent writers of one term: their writes meet in fencegate's
	// batches, next to other workers' and zombies' writes.
	var wg sync.WaitGroup
	for range max(1, w.cfg.Concurrency) {
		wg.Go(loop)
	}
	wg.Wait()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// newWriter returns how the worker sends a record: through fencegate, or
// straight to the backend in control mode. In fenced mode it also returns
// how to send any write (send), which control mode has not.
func newWriter(ctx context.Context, cfg workerConfig) (writeFunc, sendFunc, func(), error) {
	switch {
	case cfg.Mode == "control" && cfg.Protocol == protoPgwire:
		s, err := newPgwireSender(cfg, tlsFiles{}, false)
		if err != nil {
			return nil, nil, nil, err
		}
		return func(ctx context.Context, token, seq int64) (Outcome, string) {
			return s.send(ctx, token, recordRequest(cfg, token, seq))
		}, nil, s.Close, nil
	case cfg.Mode == "fenced":
		send, closeSend, err := newSender(cfg, cfg.TLS)
		if err != nil {
			return nil, nil, nil, err
		}
		write := func(ctx context.Context, token, seq int64) (Outcome, string) {
			return send(ctx, token, recordRequest(cfg, token, seq))
		}
		return write, send, closeSend, nil
	case cfg.Mode == "control" && cfg.Backend == "postgres":
		pc, err := pgxpool.ParseConfig(cfg.PostgresDSN)
		if err != nil {
			return nil, nil, nil, err
		}
		pc.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, nil, nil, err
		}
		return func(ctx context.Context, token, seq int64) (Outcome, string) {
			_, err := pool.Exec(ctx, ledgerInsert, cfg.Fence, cfg.ID, token, seq)
			return pgOutcome(err)
		}, nil, pool.Close, nil
	case cfg.Mode == "control" && cfg.Backend == "redis":
		rc := goredis.NewClient(&goredis.Options{Addr: cfg.RedisAddr, MaxRetries: -1, DialTimeout: time.Second})
		return func(ctx context.Context, token, seq int64) (Outcome, string) {
			err := rc.RPush(ctx, ledgerKey(cfg.Fence), redisRecord(cfg.ID, token, seq)).Err()
			return redisOutcome(err)
		}, nil, func() { rc.Close() }, nil
	}
	return nil, nil, nil, fmt.Errorf("worker: unknown mode %q or backend %q", cfg.Mode, cfg.Backend)
}

// recordRequest is the ordinary write of record (token, seq).
func recordRequest(cfg workerConfig, token, seq int64) request {
	if cfg.Backend == "postgres" {
		return request{stmts: []stmt{recordStmt(cfg, token, seq)}}
	}
	return request{cmds: [][]string{recordCmd(cfg, token, seq)}}
}

func recordStmt(cfg workerConfig, token, seq int64) stmt {
	return stmt{sql: ledgerInsert, params: []any{cfg.Fence, cfg.ID, token, seq}}
}

func recordCmd(cfg workerConfig, token, seq int64) []string {
	return []string{"RPUSH", ledgerKey(cfg.Fence), redisRecord(cfg.ID, token, seq)}
}

// pgOutcome classifies a direct INSERT's error. The statement commits on
// its own, so it is classified as a pgwire COMMIT: a lost connection
// leaves the outcome unknown, whatever pgconn's SafeToRetry says
// (pgwireOutcome).
func pgOutcome(err error) (Outcome, string) { return pgwireOutcome(err, true) }

// redisOutcome classifies a direct RPUSH's error.
func redisOutcome(err error) (Outcome, string) {
	var rerr goredis.Error
	switch {
	case err == nil:
		return Acked, ""
	case errors.As(err, &rerr):
		return Refused, rerr.Error()
	}
	return Unknown, err.Error()
}

// newSender sends writes through fencegate by cfg.Protocol, over TLS with
// files when files.CA is set.
func newSender(cfg workerConfig, files tlsFiles) (sendFunc, func(), error) {
	switch cfg.Protocol {
	case protoPgwire:
		s, err := newPgwireSender(cfg, files, true)
		if err != nil {
			return nil, nil, err
		}
		return s.send, s.Close, nil
	case protoRESP:
		s, err := newRespSender(cfg, files)
		if err != nil {
			return nil, nil, err
		}
		return s.send, s.Close, nil
	}
	return newFencedSender(cfg, files)
}

// newFencedSender sends writes through fencegate, each over gRPC or, with
// probability cfg.HTTPP, over HTTP/JSON, spread round-robin over the
// replicas; over TLS with files when files.CA is set.
func newFencedSender(cfg workerConfig, files tlsFiles) (sendFunc, func(), error) {
	if len(cfg.Gateways) == 0 {
		return nil, nil, errors.New("worker: --gateways is required in fenced mode")
	}
	if cfg.HTTPP > 0 && len(cfg.HTTPGateways) == 0 {
		return nil, nil, errors.New("worker: --http-gateways is required with --http above 0")
	}
	r := manual.NewBuilderWithScheme("fencechaos")
	addrs := make([]resolver.Address, len(cfg.Gateways))
	for i, a := range cfg.Gateways {
		addrs[i] = resolver.Address{Addr: a}
	}
	r.InitialState(resolver.State{Addresses: addrs})
	creds := insecure.NewCredentials()
	var tc *tls.Config
	if files.CA != "" {
		var err error
		if tc, err = files.config(); err != nil {
			return nil, nil, fmt.Errorf("worker: TLS: %w", err)
		}
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(r.Scheme()+":///fencegate",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
	)
	if err != nil {
		return nil, nil, err
	}
	gw := fencegatev1.NewGatewayClient(conn)
	viaHTTP, closeHTTP := newHTTPSender(cfg, tc)
	// The writing goroutines share the draw.
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x4777))
	return func(ctx context.Context, token int64, req request) (Outcome, string) {
		mu.Lock()
		useHTTP := rng.Float64() < cfg.HTTPP
		mu.Unlock()
		if useHTTP {
			return viaHTTP(ctx, token, req)
		}
		ctx = metadata.AppendToOutgoingContext(ctx, "fencing-token", strconv.FormatInt(token, 10))
		var err error
		switch cfg.Backend {
		case "postgres":
			_, err = gw.Exec(ctx, &fencegatev1.ExecRequest{Fence: cfg.Fence, Statements: grpcStatements(req.stmts)})
		default:
			_, err = gw.Redis(ctx, &fencegatev1.RedisRequest{Fence: cfg.Fence, Commands: grpcCommands(req.cmds)})
		}
		return grpcOutcome(err)
	}, func() { conn.Close(); closeHTTP() }, nil
}

func grpcStatements(stmts []stmt) []*fencegatev1.Statement {
	out := make([]*fencegatev1.Statement, len(stmts))
	for i, st := range stmts {
		ps := make([]*structpb.Value, len(st.params))
		for j, p := range st.params {
			switch p := p.(type) {
			case int64:
				ps[j] = structpb.NewNumberValue(float64(p)) // tokens and seqs are far below 2^53
			default:
				ps[j] = structpb.NewStringValue(fmt.Sprint(p))
			}
		}
		out[i] = &fencegatev1.Statement{Sql: st.sql, Params: ps}
	}
	return out
}

func grpcCommands(cmds [][]string) []*structpb.ListValue {
	out := make([]*structpb.ListValue, len(cmds))
	for i, c := range cmds {
		vs := make([]*structpb.Value, len(c))
		for j, a := range c {
			vs[j] = structpb.NewStringValue(a)
		}
		out[i] = &structpb.ListValue{Values: vs}
	}
	return out
}

// grpcOutcome classifies fencegate's answer. A refusal says nothing was
// written unless its metadata says "outcome: unknown"; an error without a
// fencegate ErrorInfo (deadline, broken connection) says nothing at all.
func grpcOutcome(err error) (Outcome, string) {
	if err == nil {
		return Acked, ""
	}
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != "fencegate" {
			continue
		}
		if info.GetMetadata()["outcome"] == "unknown" {
			return Unknown, info.GetReason() + " (outcome unknown)"
		}
		return Refused, info.GetReason()
	}
	if tlsRefused(st.Message()) {
		return Refused, reasonTLSRefused
	}
	return Unknown, st.Code().String() + ": " + st.Message()
}

// reasonTLSRefused is the outcome's reason when the gateway refused the
// TLS handshake (a client certificate missing or not trusted).
const reasonTLSRefused = "TLS_REFUSED"

// tlsRefused reports whether a client error is the gateway's TLS alert: it
// refused the connection, so no request on it reached fencegate.
func tlsRefused(msg string) bool { return strings.Contains(msg, "remote error: tls: ") }

// newHTTPSender sends writes through fencegate's HTTP/JSON API,
// round-robin over the replicas, over TLS with tc when not nil. Unlike a
// gRPC deadline, the client's timeout is not sent with the request:
// fencegate learns of it only when the connection closes, as with most
// HTTP clients.
func newHTTPSender(cfg workerConfig, tc *tls.Config) (sendFunc, func()) {
	tr := &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true, TLSClientConfig: tc}
	hc := &http.Client{Transport: tr}
	scheme := "http://"
	if tc != nil {
		scheme = "https://"
	}
	var next atomic.Uint64
	return func(ctx context.Context, token int64, req request) (Outcome, string) {
		addr := cfg.HTTPGateways[(next.Add(1)-1)%uint64(len(cfg.HTTPGateways))]
		var path string
		var body []byte
		switch cfg.Backend {
		case "postgres":
			path = "/v1/fences/" + cfg.Fence + "/sql"
			stmts := make([]any, len(req.stmts))
			for i, st := range req.stmts {
				m := map[string]any{"sql": st.sql}
				if len(st.params) > 0 {
					m["params"] = st.params
				}
				stmts[i] = m
			}
			body, _ = json.Marshal(map[string]any{"statements": stmts})
		default:
			path = "/v1/fences/" + cfg.Fence + "/redis"
			body, _ = json.Marshal(map[string]any{"commands": req.cmds})
		}
		hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, scheme+addr+path, bytes.NewReader(body))
		if err != nil {
			return Unknown, err.Error()
		}
		hreq.Header.Set("Content-Type", "application/json")
		hreq.Header.Set("Fencing-Token", strconv.FormatInt(token, 10))
		resp, err := hc.Do(hreq)
		if err != nil {
			if tlsRefused(err.Error()) {
				return Refused, reasonTLSRefused
			}
			return Unknown, "HTTP: " + err.Error()
		}
		defer resp.Body.Close()
		answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return Unknown, "HTTP: " + err.Error()
		}
		return httpOutcome(resp.StatusCode, answer)
	}, tr.CloseIdleConnections
}

// httpOutcome classifies fencegate's HTTP answer as grpcOutcome does its
// gRPC one: the body of an error is grpc-gateway's JSON google.rpc.Status.
func httpOutcome(code int, body []byte) (Outcome, string) {
	if code == http.StatusOK {
		return Acked, ""
	}
	var st struct {
		Details []struct {
			Domain   string            `json:"domain"`
			Reason   string            `json:"reason"`
			Metadata map[string]string `json:"metadata"`
		} `json:"details"`
	}
	if json.Unmarshal(body, &st) == nil {
		for _, d := range st.Details {
			if d.Domain != "fencegate" {
				continue
			}
			if d.Metadata["outcome"] == "unknown" {
				return Unknown, d.Reason + " (outcome unknown)"
			}
			return Refused, d.Reason
		}
	}
	return Unknown, fmt.Sprintf("HTTP %d: %.200s", code, body)
}
