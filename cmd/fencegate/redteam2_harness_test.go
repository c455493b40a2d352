package main

// Red-team (round 2) harness: the real `fencegate serve` binary, started
// as an operator would, against throwaway PostgreSQL and Redis and an
// embedded etcd, with writers on all four ways in that record every
// answer they got, so the backends can be checked against them.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/election/embedded"
	"github.com/fencegate/fencegate/election/freeport"
	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

var (
	rt2BinOnce sync.Once
	rt2Bin     string
	rt2BinErr  error
)

// rt2Binary builds fencegate (with the race detector, so a race in the
// shutdown path shows in its log) once per test binary.
func rt2Binary(t *testing.T) string {
	t.Helper()
	rt2BinOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			rt2BinErr = err
			return
		}
		// Once for every test of the binary; TestMain removes it.
		dir, err := os.MkdirTemp("", "rt2-fencegate-") //nolint:usetesting // shared by tests, removed by TestMain
		if err != nil {
			rt2BinErr = err
			return
		}
		rt2Bin = filepath.Join(dir, "fencegate")
		if out, err := exec.Command(gobin, "build", "-race", "-o", rt2Bin, ".").CombinedOutput(); err != nil {
			rt2BinErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if rt2BinErr != nil {
		t.Fatal(rt2BinErr)
	}
	return rt2Bin
}

type rt2Env struct {
	pg    *throwaway.Server
	rd    *redisthrowaway.Server
	etcd  *embedded.Server
	cli   *clientv3.Client
	admin *pgx.Conn
	rdb   *goredis.Client
}

func newRT2Env(t *testing.T) *rt2Env {
	t.Helper()
	ctx := t.Context()
	e := &rt2Env{}
	var err error
	// Runs last: go-redis clients that failed to dial keep a goroutine
	// that retries once a second until it sees its pool closed.
	t.Cleanup(func() { time.Sleep(1500 * time.Millisecond) })
	if e.pg, err = throwaway.Start(ctx, throwaway.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.pg.Close() })
	if e.rd, err = redisthrowaway.Start(ctx, redisthrowaway.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.rd.Close() })
	if e.etcd, err = embedded.Start(ctx, embedded.Config{Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.etcd.Close() })
	if e.cli, err = clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.cli.Close() })
	if _, err := e.pg.RuntimeRole(ctx, "gw"); err != nil {
		t.Fatal(err)
	}
	// The PostgreSQL listener's clients log in as app, with no fencegate role.
	if _, err := e.pg.ListenerRole(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if e.admin, err = pgx.Connect(ctx, e.pg.DSN()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.admin.Close(context.WithoutCancel(ctx)) })
	for _, sql := range []string{
		"CREATE TABLE rt2 (id text PRIMARY KEY)",
		"GRANT SELECT, INSERT ON rt2 TO gw, app",
	} {
		if _, err := e.admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	e.rdb = goredis.NewClient(&goredis.Options{
		Addr: e.rd.Addr(), MaxRetries: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { e.rdb.Close() })
	return e
}

// lead campaigns in election fence and returns the token and a function
// that resigns (ends the term).
func (e *rt2Env) lead(t *testing.T, fence, name string) (uint64, func()) {
	t.Helper()
	s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(60))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	el := concurrency.NewElection(s, "/fencegate/elections/"+fence)
	if err := el.Campaign(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	return uint64(el.Rev()), func() {
		if err := el.Resign(context.WithoutCancel(t.Context())); err != nil {
			t.Errorf("resign: %v", err)
		}
	}
}

// pgIDs is every id in table rt2.
func (e *rt2Env) pgIDs(t *testing.T) map[string]bool {
	t.Helper()
	rows, err := e.admin.Query(context.WithoutCancel(t.Context()), "SELECT id FROM rt2")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// redisKeys is every key of fence fence in Redis.
func (e *rt2Env) redisKeys(t *testing.T, fence string) map[string]bool {
	t.Helper()
	keys, err := e.rdb.Keys(context.WithoutCancel(t.Context()), "{"+fence+"}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// rt2Proc is a running fencegate serve binary.
type rt2Proc struct {
	cmd                        *exec.Cmd
	grpc, http, pg, resp, metr string
	errPath                    string
	exited                     chan struct{}
	exitErr                    error
	exitAt                     time.Time
}

func (p *rt2Proc) log() string {
	b, _ := os.ReadFile(p.errPath)
	return string(b)
}

// running reports whether the process has not exited yet.
func (p *rt2Proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// startServe runs the binary's serve with all four ways in on free ports
// and waits for /readyz 200.
func (e *rt2Env) startServe(t *testing.T, extra ...string) *rt2Proc {
	t.Helper()
	p, refused := e.tryServe(t, extra...)
	if p == nil {
		t.Fatalf("serve exited: %s", refused)
	}
	return p
}

// tryServe is startServe, for a serve that may refuse to start: the
// process once ready, or nil and how it exited with what it said.
func (e *rt2Env) tryServe(t *testing.T, extra ...string) (*rt2Proc, string) {
	t.Helper()
	bin := rt2Binary(t)
	p := &rt2Proc{
		grpc: freeport.Addr(t), http: freeport.Addr(t), pg: freeport.Addr(t), resp: freeport.Addr(t), metr: freeport.Addr(t),
		errPath: filepath.Join(t.TempDir(), "serve.err"), exited: make(chan struct{}),
	}
	args := append([]string{
		"serve", "--etcd-endpoints=" + strings.Join(e.etcd.Endpoints(), ","),
		"--postgres-dsn=" + e.pg.DSNAs("gw"), "--redis-addr=" + e.rd.Addr(),
		"--grpc-addr=" + p.grpc, "--http-addr=" + p.http, "--pg-listen-addr=" + p.pg, "--redis-listen-addr=" + p.resp,
		"--metrics-addr=" + p.metr,
	}, extra...)
	f, err := os.Create(p.errPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		p.exitAt = time.Now()
		f.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if p.running() {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _ := rt2Get("http://" + p.http + "/readyz"); code == 200 {
			return p, ""
		}
		if !p.running() {
			return nil, fmt.Sprintf("%v\n%s", p.exitErr, p.log())
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready after 60s\n%s", p.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var rt2HTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// rt2Get is a GET's status and body; code 0 when there was no answer.
func rt2Get(url string) (int, string) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// ---- what the clients saw

type rt2Outcome int

const (
	rt2Acked   rt2Outcome = iota // the write was acknowledged
	rt2Refused                   // a refusal that says nothing was applied
	rt2Unknown                   // transport error, or a refusal saying outcome unknown
)

func (o rt2Outcome) String() string {
	return [...]string{"acked", "refused", "unknown"}[o]
}

type rt2Attempt struct {
	front, backend, key string
	out                 rt2Outcome
	reason              string // fencegate's reason when there is one
	detail              string
	at                  time.Time
	took                time.Duration
	start               time.Time
}

type rt2Record struct {
	mu       sync.Mutex
	attempts []rt2Attempt
}

func (r *rt2Record) add(a rt2Attempt) {
	a.at = time.Now()
	if !a.start.IsZero() {
		a.took = a.at.Sub(a.start)
	}
	r.mu.Lock()
	r.attempts = append(r.attempts, a)
	r.mu.Unlock()
}

func (r *rt2Record) all() []rt2Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]rt2Attempt(nil), r.attempts...)
}

// check compares what the clients saw with what the backends hold.
func (r *rt2Record) check(t *testing.T, e *rt2Env, fence string) (counts map[string]int) {
	t.Helper()
	ids, keys := e.pgIDs(t), e.redisKeys(t, fence)
	counts = map[string]int{}
	for _, a := range r.all() {
		counts[a.front+"/"+a.backend+"/"+a.out.String()]++
		var present bool
		if a.backend == "postgres" {
			present = ids[a.key]
		} else {
			present = keys[a.key]
		}
		switch {
		case a.out == rt2Acked && !present:
			t.Errorf("LOST: %s %s write %q was acknowledged at %s and is not in the backend", a.front, a.backend, a.key, a.at.Format("15:04:05.000"))
		case a.out == rt2Refused && present:
			t.Errorf("REFUSAL LIED: %s %s write %q was refused (%s: %s) and IS in the backend", a.front, a.backend, a.key, a.reason, a.detail)
		}
	}
	return counts
}

// ---- classifying answers

// rt2HTTPAnswer classifies an HTTP answer.
func rt2HTTPAnswer(code int, body []byte, err error) (rt2Outcome, string, string) {
	if err != nil {
		return rt2Unknown, "", err.Error()
	}
	if code == 200 {
		return rt2Acked, "", ""
	}
	var st struct {
		Message string `json:"message"`
		Details []struct {
			Reason   string            `json:"reason"`
			Domain   string            `json:"domain"`
			Metadata map[string]string `json:"metadata"`
		} `json:"details"`
	}
	if json.Unmarshal(body, &st) != nil {
		return rt2Unknown, "", fmt.Sprintf("HTTP %d %s", code, body)
	}
	for _, d := range st.Details {
		if d.Domain == "fencegate" && d.Reason != "" {
			if d.Metadata["outcome"] == "unknown" {
				return rt2Unknown, d.Reason, st.Message
			}
			return rt2Refused, d.Reason, st.Message
		}
	}
	return rt2Unknown, "", fmt.Sprintf("HTTP %d %s", code, body)
}

func rt2GRPCAnswer(err error) (rt2Outcome, string, string) {
	if err == nil {
		return rt2Acked, "", ""
	}
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.Domain == "fencegate" {
			if ei.Metadata["outcome"] == "unknown" {
				return rt2Unknown, ei.Reason, err.Error()
			}
			return rt2Refused, ei.Reason, err.Error()
		}
	}
	return rt2Unknown, "", err.Error()
}

func rt2PgAnswer(err error) (rt2Outcome, string, string) {
	if err == nil {
		return rt2Acked, "", ""
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if strings.Contains(pe.Message, "outcome unknown") || strings.Contains(pe.Message, "may have committed") {
			return rt2Unknown, pe.Code, pe.Message
		}
		// An error answer to a one-statement implicit transaction: it
		// was rolled back.
		return rt2Refused, pe.Code, pe.Message
	}
	return rt2Unknown, "", err.Error()
}

func rt2RedisAnswer(err error) (rt2Outcome, string, string) {
	if err == nil {
		return rt2Acked, "", ""
	}
	var re goredis.Error
	if errors.As(err, &re) && !isNetErr(err) {
		msg := err.Error()
		if strings.Contains(msg, "outcome unknown") {
			return rt2Unknown, strings.Fields(msg)[0], msg
		}
		return rt2Refused, strings.Fields(msg)[0], msg
	}
	return rt2Unknown, "", err.Error()
}

func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// ---- writers

// rt2Load runs writers on every way in until stop is closed.
type rt2Load struct {
	rec   *rt2Record
	seq   atomic.Int64
	wg    sync.WaitGroup
	stop  chan struct{}
	fence string
	token uint64
}

func (l *rt2Load) key(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, l.seq.Add(1))
}

func (l *rt2Load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *rt2Load) pause(ok bool) {
	if !ok {
		time.Sleep(5 * time.Millisecond)
	}
}

// start launches n writers of each kind against p.
func (l *rt2Load) start(t *testing.T, p *rt2Proc, n int) {
	t.Helper()
	// The writers' own context: they end when stopped, not with the test.
	bg := context.WithoutCancel(t.Context())
	l.stop = make(chan struct{})
	if l.rec == nil {
		l.rec = &rt2Record{}
	}
	tok := strconv.FormatUint(l.token, 10)
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	gc := fencegatev1.NewGatewayClient(conn)
	for range n {
		// HTTP → PostgreSQL and Redis
		l.wg.Add(2)
		go func() {
			defer l.wg.Done()
			for !l.stopped() {
				t0 := time.Now()
				k := l.key("h")
				body := fmt.Sprintf(`{"statements":[{"sql":"INSERT INTO rt2(id) VALUES ($1)","params":[%q]}]}`, k)
				out, reason, detail := rt2HTTPPost(p.http, "/v1/fences/"+l.fence+"/sql", tok, body)
				l.rec.add(rt2Attempt{front: "http", backend: "postgres", key: k, out: out, reason: reason, detail: detail, start: t0})
				l.pause(out == rt2Acked)
			}
		}()
		go func() {
			defer l.wg.Done()
			for !l.stopped() {
				t0 := time.Now()
				k := "{" + l.fence + "}:" + l.key("hr")
				body := fmt.Sprintf(`{"commands":[["SET",%q,"1"]]}`, k)
				out, reason, detail := rt2HTTPPost(p.http, "/v1/fences/"+l.fence+"/redis", tok, body)
				l.rec.add(rt2Attempt{front: "http", backend: "redis", key: k, out: out, reason: reason, detail: detail, start: t0})
				l.pause(out == rt2Acked)
			}
		}()
		// gRPC → PostgreSQL and Redis
		l.wg.Add(2)
		go func() {
			defer l.wg.Done()
			for !l.stopped() {
				t0 := time.Now()
				k := l.key("g")
				p, _ := structpb.NewValue(k)
				ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(bg, "fencing-token", tok), 15*time.Second)
				_, err := gc.Exec(ctx, &fencegatev1.ExecRequest{Fence: l.fence, Statements: []*fencegatev1.Statement{{Sql: "INSERT INTO rt2(id) VALUES ($1)", Params: []*structpb.Value{p}}}})
				cancel()
				out, reason, detail := rt2GRPCAnswer(err)
				l.rec.add(rt2Attempt{front: "grpc", backend: "postgres", key: k, out: out, reason: reason, detail: detail, start: t0})
				l.pause(out == rt2Acked)
			}
		}()
		go func() {
			defer l.wg.Done()
			for !l.stopped() {
				t0 := time.Now()
				k := "{" + l.fence + "}:" + l.key("gr")
				cmd, _ := structpb.NewList([]any{"SET", k, "1"})
				ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(bg, "fencing-token", tok), 15*time.Second)
				_, err := gc.Redis(ctx, &fencegatev1.RedisRequest{Fence: l.fence, Commands: []*structpb.ListValue{cmd}})
				cancel()
				out, reason, detail := rt2GRPCAnswer(err)
				l.rec.add(rt2Attempt{front: "grpc", backend: "redis", key: k, out: out, reason: reason, detail: detail, start: t0})
				l.pause(out == rt2Acked)
			}
		}()
		// PostgreSQL listener (pgx)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			var c *pgx.Conn
			defer func() {
				if c != nil {
					c.Close(bg)
				}
			}()
			for !l.stopped() {
				if c == nil || c.IsClosed() {
					ctx, cancel := context.WithTimeout(bg, 5*time.Second)
					var err error
					c, err = pgx.Connect(ctx, fmt.Sprintf("postgres://app@%s/postgres?sslmode=disable&fencegate.fence=%s&fencegate.token=%s", p.pg, l.fence, tok))
					cancel()
					if err != nil {
						c = nil
						time.Sleep(10 * time.Millisecond)
						continue
					}
				}
				k := l.key("p")
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(bg, 15*time.Second)
				_, err := c.Exec(ctx, "INSERT INTO rt2(id) VALUES ($1)", k)
				cancel()
				out, reason, detail := rt2PgAnswer(err)
				l.rec.add(rt2Attempt{front: "pgwire", backend: "postgres", key: k, out: out, reason: reason, detail: detail, start: t0})
				l.pause(out == rt2Acked)
			}
		}()
		// RESP listener (go-redis)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c := goredis.NewClient(&goredis.Options{
				Addr: p.resp, Username: l.fence, Password: tok, MaxRetries: -1, PoolSize: 1,
				DialTimeout: 2 * time.Second, ReadTimeout: 15 * time.Second,
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
			})
			defer c.Close()
			for !l.stopped() {
				t0 := time.Now()
				k := "{" + l.fence + "}:" + l.key("r")
				err := c.Set(bg, k, "1", 0).Err()
				out, reason, detail := rt2RedisAnswer(err)
				l.rec.add(rt2Attempt{front: "resp", backend: "redis", key: k, out: out, reason: reason, detail: detail, start: t0})
				l.pause(out == rt2Acked)
			}
		}()
	}
}

func (l *rt2Load) finish() {
	close(l.stop)
	l.wg.Wait()
}

func rt2HTTPPost(addr, path, token, body string) (rt2Outcome, string, string) {
	req, err := http.NewRequest("POST", "http://"+addr+path, bytes.NewBufferString(body))
	if err != nil {
		return rt2Unknown, "", err.Error()
	}
	req.Header.Set("Fencing-Token", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := rt2HTTP.Do(req)
	if err != nil {
		return rt2HTTPAnswer(0, nil, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return rt2HTTPAnswer(resp.StatusCode, b, err)
}

// rt2Metrics scrapes /metrics into name{labels} → value.
func rt2Metrics(t *testing.T, url string) map[string]float64 {
	t.Helper()
	code, body := rt2Get(url)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m
}

// rt2Dials reports whether a TCP connection to addr is accepted.
func rt2Dials(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
