package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/proxy/redis"
)

// The paths, in report order.
const (
	pgDirectPlain     = "pg-direct-plain"
	pgDirectFenced    = "pg-direct-fenced"
	pgWire            = "pg-wire"
	pgBouncer         = "pg-bouncer"
	pgBouncerFenced   = "pg-bouncer-fenced"
	pgGRPC            = "pg-grpc"
	pgHTTP            = "pg-http"
	redisDirectPlain  = "redis-direct-plain"
	redisDirectFenced = "redis-direct-fenced"
	redisRESP         = "redis-resp"
	redisTwemproxy    = "redis-twemproxy"
	// redisTwemproxyFenced is redis-direct-fenced's script run through
	// the same nutcracker: the two proxies on the same Redis work, as
	// pg-bouncer-fenced is for pgbouncer.
	redisTwemproxyFenced = "redis-twemproxy-fenced"
	redisGRPC            = "redis-grpc"
	redisHTTP            = "redis-http"
)

var allPaths = []string{
	pgDirectPlain, pgDirectFenced, pgWire, pgBouncer, pgBouncerFenced, pgGRPC, pgGRPCSecure, pgHTTP, pgHTTPSecure,
	redisDirectPlain, redisDirectFenced, redisRESP, redisTwemproxy, redisTwemproxyFenced, redisGRPC, redisGRPCSecure, redisHTTP, redisHTTPSecure,
}

func isPath(p string) bool {
	for _, q := range allPaths {
		if p == q {
			return true
		}
	}
	return false
}

// viaGateway reports whether path goes through fencegate.
func viaGateway(path string) bool {
	switch plainTwin(path) {
	case pgWire, pgGRPC, pgHTTP, redisRESP, redisGRPC, redisHTTP:
		return true
	}
	return false
}

// proxyPID is the process between the clients and the backend on path
// (fencegate or pgbouncer), whose CPU and RSS are reported; 0 for none.
func (e *env) proxyPID(path string) int {
	switch {
	case viaGateway(path):
		return e.gateFor(path).pid()
	case path == pgBouncer || path == pgBouncerFenced:
		return e.bouncer.pid()
	case path == redisTwemproxy || path == redisTwemproxyFenced:
		return e.twem.pid()
	}
	return 0
}

// gateFor is the gateway path goes through.
func (e *env) gateFor(path string) *gateway {
	if secure(path) {
		return e.secure
	}
	return e.gate
}

// The write every path makes: the INSERT alone, or a Redis SET.
const (
	insertSQL  = "INSERT INTO bench_ledger(worker, token) VALUES ($1, $2)"
	advanceSQL = "SELECT fencegate.advance($1, $2)" // exactly what fencegate sends first
)

func redisKey(fence string) string { return "{" + fence + "}:last" }

// target is what one client writes to: a fence and its leader's token.
type target struct {
	fence string
	token int64
}

// clientSet is the per-load client machinery of a path and how to release it.
type clientSet struct {
	ops   []op
	close func()
}

// buildOps makes one op per client for path; client i writes to
// targets[i % len(targets)]. With stale set, the ops expect a STALE_TOKEN
// refusal and fail on anything else.
func (e *env) buildOps(ctx context.Context, cfg config, path string, clients int, targets []target, stale bool) (clientSet, error) {
	at := func(i int) target { return targets[i%len(targets)] }
	ops := make([]op, clients)
	switch path {
	case pgDirectPlain, pgDirectFenced, pgWire, pgBouncer, pgBouncerFenced:
		return e.pgOps(ctx, path, ops, at, stale)

	case redisDirectPlain:
		c := goredis.NewClient(&goredis.Options{Addr: e.redisAddr, Protocol: 2, PoolSize: clients, MinIdleConns: clients, DisableIdentity: true, MaxRetries: -1})
		for i := range ops {
			key := redisKey(at(i).fence)
			ops[i] = func(ctx context.Context) error { return c.Set(ctx, key, "7", 0).Err() }
		}
		return clientSet{ops: ops, close: func() { _ = c.Close() }}, nil

	case redisDirectFenced:
		// fencegate's own backend, in this process: the same EVALSHA of the
		// same script with the same keys and arguments, no gateway. A
		// connection per client, so no write waits for another's.
		rc := redis.DefaultConfig()
		rc.PoolSize = clients
		b, err := redis.Open(ctx, e.redisAddr, rc)
		if err != nil {
			return clientSet{}, err
		}
		for i := range ops {
			t := at(i)
			cmds := [][]string{{"SET", redisKey(t.fence), "7"}}
			ops[i] = func(ctx context.Context) error {
				_, err := b.Exec(ctx, t.fence, tokenOf(t.token), cmds)
				return err
			}
		}
		return clientSet{ops: ops, close: func() { _ = b.Close() }}, nil

	case redisRESP, redisTwemproxy, redisTwemproxyFenced:
		// One connection per client, as separate workers would have, on
		// one minimal client for the three: nutcracker answers no HELLO,
		// which go-redis sends first. The RESP listener's clients log in
		// with their fence and token; redis-twemproxy-fenced's send
		// redis-direct-fenced's EVALSHA (the backend's Command).
		var b *redis.Backend
		if path == redisTwemproxyFenced {
			var err error
			if b, err = redis.Open(ctx, e.redisAddr, redis.DefaultConfig()); err != nil {
				return clientSet{}, err
			}
			defer func() { _ = b.Close() }()
		}
		conns := make([]*respConn, 0, len(ops))
		closeAll := func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}
		for i := range ops {
			t := at(i)
			addr, auth, cmd := e.twemAddr(), []string(nil), []string{"SET", redisKey(t.fence), "7"}
			var want []byte
			switch path {
			case redisRESP:
				addr, auth = e.gate.respAddr, []string{"AUTH", t.fence, strconv.FormatInt(t.token, 10)}
			case redisTwemproxyFenced:
				var err error
				if cmd, err = fencedCommand(ctx, b, t, cmd); err != nil {
					closeAll()
					return clientSet{}, fmt.Errorf("client %d: %w", i, err)
				}
				want = []byte("*2\r\n:1\r\n+OK\r\n") // applied, SET's OK
			}
			c, err := dialRESP(ctx, addr, auth, cmd...)
			if err != nil {
				closeAll()
				return clientSet{}, fmt.Errorf("client %d: %w", i, err)
			}
			c.want = want
			conns = append(conns, c)
			ops[i] = func(ctx context.Context) error { return respOutcome(c.do(ctx), stale) }
		}
		return clientSet{ops: ops, close: closeAll}, nil

	case pgGRPC, redisGRPC, pgGRPCSecure, redisGRPCSecure:
		g := e.gateFor(path)
		creds := insecure.NewCredentials()
		if g.tls != nil {
			creds = credentials.NewTLS(g.tls)
		}
		nconn := (clients + cfg.grpcPerConn - 1) / cfg.grpcPerConn
		conns := make([]*grpc.ClientConn, nconn)
		closeAll := func() {
			for _, c := range conns {
				if c != nil {
					_ = c.Close()
				}
			}
		}
		for i := range conns {
			c, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(creds))
			if err != nil {
				closeAll()
				return clientSet{}, err
			}
			c.Connect()
			conns[i] = c
		}
		for i := range ops {
			t := at(i)
			gc := fencegatev1.NewGatewayClient(conns[i%nconn])
			md := metadata.Pairs("fencing-token", strconv.FormatInt(t.token, 10))
			if plainTwin(path) == pgGRPC {
				req := &fencegatev1.ExecRequest{Fence: t.fence, Statements: []*fencegatev1.Statement{{
					Sql:    insertSQL,
					Params: []*structpb.Value{structpb.NewStringValue(t.fence), structpb.NewNumberValue(float64(t.token))},
				}}}
				ops[i] = func(ctx context.Context) error {
					_, err := gc.Exec(metadata.NewOutgoingContext(ctx, md), req)
					return grpcOutcome(err, stale)
				}
				continue
			}
			cmd, _ := structpb.NewList([]any{"SET", redisKey(t.fence), "7"})
			req := &fencegatev1.RedisRequest{Fence: t.fence, Commands: []*structpb.ListValue{cmd}}
			ops[i] = func(ctx context.Context) error {
				_, err := gc.Redis(metadata.NewOutgoingContext(ctx, md), req)
				return grpcOutcome(err, stale)
			}
		}
		return clientSet{ops: ops, close: closeAll}, nil

	case pgHTTP, redisHTTP, pgHTTPSecure, redisHTTPSecure:
		g := e.gateFor(path)
		tr := &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients, IdleConnTimeout: time.Minute, DisableCompression: true, TLSClientConfig: g.tls}
		hc := &http.Client{Transport: tr}
		for i := range ops {
			t := at(i)
			var (
				url  string
				body []byte
			)
			if plainTwin(path) == pgHTTP {
				url = g.httpURL("/v1/fences/" + t.fence + "/sql")
				body, _ = json.Marshal(map[string]any{"statements": []any{map[string]any{"sql": insertSQL, "params": []any{t.fence, t.token}}}})
			} else {
				url = g.httpURL("/v1/fences/" + t.fence + "/redis")
				body, _ = json.Marshal(map[string]any{"commands": [][]string{{"SET", redisKey(t.fence), "7"}}})
			}
			tok := strconv.FormatInt(t.token, 10)
			ops[i] = func(ctx context.Context) error {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
				if err != nil {
					return err
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Fencing-Token", tok)
				resp, err := hc.Do(req)
				if err != nil {
					return err
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return httpOutcome(resp.StatusCode, b, stale)
			}
		}
		return clientSet{ops: ops, close: tr.CloseIdleConnections}, nil
	}
	return clientSet{}, fmt.Errorf("unknown path %q", path)
}

var errStaleAccepted = errors.New("a stale token was accepted")

// pgOps makes the clients of the PostgreSQL protocol paths: one pgx
// connection per client, as separate workers would have, all logged in as
// the same role, with the statements prepared once on connecting so that
// every transaction is one Bind/Describe/Execute per statement and one
// Sync, in one write:
//
//   - pg-direct-plain, pg-bouncer: the INSERT (pgx Exec);
//   - pg-direct-fenced, pg-bouncer-fenced: a pgx Batch of
//     fencegate.advance($1,$2) then the INSERT, one implicit transaction
//     (what fencegate's listener sends for pg-wire);
//   - pg-wire: the INSERT through fencegate's listener, with the fence and
//     token as startup parameters; fencegate adds the fence check.
func (e *env) pgOps(ctx context.Context, path string, ops []op, at func(int) target, stale bool) (clientSet, error) {
	conns := make([]*pgx.Conn, 0, len(ops))
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close(context.WithoutCancel(ctx))
		}
	}
	dsn := e.workerDSN
	switch path {
	case pgWire:
		dsn = fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable", benchListenerRole, e.gate.pgAddr)
	case pgBouncer, pgBouncerFenced:
		dsn = e.bouncer.dsn(benchWorkerRole)
	}
	fenced := path == pgDirectFenced || path == pgBouncerFenced
	for i := range ops {
		t := at(i)
		cc, err := pgx.ParseConfig(dsn)
		if err != nil {
			return clientSet{}, err
		}
		cc.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
		cc.RuntimeParams["application_name"] = "fencebench-" + path
		if path == pgWire {
			cc.RuntimeParams["fencegate.fence"] = t.fence
			cc.RuntimeParams["fencegate.token"] = strconv.FormatInt(t.token, 10)
		}
		c, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			closeAll()
			return clientSet{}, fmt.Errorf("client %d: %w", i, err)
		}
		conns = append(conns, c)
		// Named after their text: pgx's Exec and SendBatch use them.
		for _, sql := range []string{insertSQL, advanceSQL} {
			if sql == advanceSQL && !fenced {
				continue
			}
			if _, err := c.Prepare(ctx, sql, sql); err != nil {
				closeAll()
				return clientSet{}, fmt.Errorf("client %d: prepare: %w", i, err)
			}
		}
		if !fenced {
			ops[i] = func(ctx context.Context) error {
				_, err := c.Exec(ctx, insertSQL, t.fence, t.token)
				return pgOutcome(err, stale)
			}
			continue
		}
		b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, 2)}
		ops[i] = func(ctx context.Context) error {
			b.QueuedQueries = b.QueuedQueries[:0]
			b.Queue(advanceSQL, t.fence, t.token)
			b.Queue(insertSQL, t.fence, t.token)
			br := c.SendBatch(ctx, b)
			var hw int64
			if err := br.QueryRow().Scan(&hw); err != nil {
				_ = br.Close()
				return err
			}
			if _, err := br.Exec(); err != nil {
				_ = br.Close()
				return err
			}
			return br.Close()
		}
	}
	return clientSet{ops: ops, close: closeAll}, nil
}

// pgOutcome: a stale token through fencegate's listener is SQLSTATE FG001.
func pgOutcome(err error, stale bool) error {
	if !stale {
		return err
	}
	if err == nil {
		return errStaleAccepted
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "FG001" {
		return nil
	}
	return err
}

// respOutcome: a stale token through the RESP listener is -STALE_TOKEN.
func respOutcome(err error, stale bool) error {
	if !stale {
		return err
	}
	if err == nil {
		return errStaleAccepted
	}
	var er errReply
	if errors.As(err, &er) && strings.HasPrefix(string(er), "STALE_TOKEN ") {
		return nil
	}
	return err
}

// fencedCommand is the EVALSHA of t's fenced write of cmd, its script put
// in Redis's cache by a first write through b.
func fencedCommand(ctx context.Context, b *redis.Backend, t target, cmd []string) ([]string, error) {
	cmds := [][]string{cmd}
	if _, err := b.Exec(ctx, t.fence, tokenOf(t.token), cmds); err != nil {
		return nil, err
	}
	return b.Command(t.fence, tokenOf(t.token), cmds)
}

// twemAddr is twemproxy's address; empty when it is not started.
func (e *env) twemAddr() string {
	if e.twem == nil {
		return ""
	}
	return e.twem.addr
}

func grpcOutcome(err error, stale bool) error {
	if !stale {
		return err
	}
	if err == nil {
		return errStaleAccepted
	}
	if status.Code(err) != codes.Aborted {
		return err
	}
	return nil
}

func httpOutcome(code int, body []byte, stale bool) error {
	switch {
	case stale && code == http.StatusConflict:
		return nil
	case stale && code == http.StatusOK:
		return errStaleAccepted
	case !stale && code == http.StatusOK:
		return nil
	}
	return fmt.Errorf("HTTP %d: %s", code, truncate(string(body), 200))
}
