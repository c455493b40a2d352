package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/election/embedded"
	"github.com/fencegate/fencegate/election/freeport"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
)

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"serve", "--help"}, {"dev", "-h"}, {"migrate", "--help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), args, &stdout, &stderr)
			if err != nil && !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("got error %v, want help", err)
			}
			if !strings.Contains(stdout.String(), "Usage") {
				t.Errorf("got stdout %q, want a usage text", stdout.String())
			}
		})
	}
}

func TestServeErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no backend", []string{"serve"}, nil, "no backend configured"},
		{"unknown flag", []string{"serve", "--bogus"}, nil, "unknown flag --bogus"},
		{"bad env", []string{"serve"}, map[string]string{"FENCEGATE_MAX_STATEMENTS": "many"}, "FENCEGATE_MAX_STATEMENTS"},
		{"bad limit", []string{"serve", "--postgres-dsn=postgres://x", "--max-statements=0"}, nil, "--max-statements=0: want at least 1"},
		{"etcd unreachable", []string{"serve", "--postgres-dsn=postgres://x@127.0.0.1:1/x", "--etcd-endpoints=127.0.0.1:1", "--etcd-dial-timeout=300ms"}, nil, "etcd at 127.0.0.1:1 is unreachable"},
		{"env dsn used", []string{"serve", "--etcd-endpoints=127.0.0.1:1", "--etcd-dial-timeout=300ms"}, map[string]string{"FENCEGATE_POSTGRES_DSN": "postgres://x"}, "etcd at"},
		{"unknown command", []string{"frobnicate"}, nil, "usage"},
		{"zookeeper route without servers", []string{"serve", "--postgres-dsn=postgres://x", "--term-sources=zk-*=zookeeper"}, nil, "--term-sources routes fences to zookeeper, and --zookeeper-servers is empty"},
		{"zookeeper session timeout", []string{"serve", "--postgres-dsn=postgres://x", "--zookeeper-session-timeout=0s"}, nil, "--zookeeper-session-timeout must be positive, got 0s"},
		{"exposed", []string{"serve", "--postgres-dsn=postgres://x", "--grpc-addr=0.0.0.0:7070"}, nil, "--grpc-addr 0.0.0.0:7070 is reachable from other hosts without --cert-file and --policy-file"},
		{"exposed pprof", []string{"serve", "--postgres-dsn=postgres://x", "--pprof-addr=:6060"}, nil, "--pprof-addr :6060 is reachable from other hosts"},
		{"shadow without policy", []string{"serve", "--postgres-dsn=postgres://x", "--policy-mode=shadow"}, nil, "--policy-mode=shadow needs --policy-file"},
		{"bad cert file", []string{"serve", "--postgres-dsn=postgres://x", "--etcd-endpoints=127.0.0.1:1", "--etcd-dial-timeout=300ms", "--cert-file=/nonexistent.pem", "--key-file=/nonexistent-key.pem"}, nil, "--cert-file /nonexistent.pem: "},
		{"pg socket without postgres", []string{"serve", "--redis-addr=127.0.0.1:1", "--pg-unix-socket-dir=/tmp"}, nil, "--pg-unix-socket-dir needs --postgres-dsn: the database its clients reach"},
		{"redis socket without redis", []string{"serve", "--postgres-dsn=postgres://x", "--redis-unix-socket=/tmp/r.sock"}, nil, "--redis-unix-socket needs --redis-addr: the Redis its clients reach"},
		{"dev postgres port", []string{"dev", "--postgres-port=70000"}, nil, "--postgres-port=70000: want a TCP port"},
		{"dev redis port", []string{"dev", "--redis-port=-1"}, nil, "--redis-port=-1: want a TCP port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tt.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("got a multi-line error %q, want one line", err)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"version"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	// The test binary is not stamped; `make build` is (see the Makefile).
	if got, want := stdout.String(), "fencegate devel (commit "; !strings.HasPrefix(got, want) {
		t.Errorf("got %q, want it to start with %q", got, want)
	}
	Version, Commit = "v1.2.3", "0123abc"
	defer func() { Version, Commit = "", "" }()
	stdout.Reset()
	if err := run(t.Context(), []string{"version"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if got, want := stdout.String(), "fencegate v1.2.3 (commit 0123abc, go"; !strings.HasPrefix(got, want) {
		t.Errorf("got %q, want it to start with %q", got, want)
	}
}

// TestDev runs `fencegate dev` on free ports and Unix sockets, checks it
// serves and is ready, then cancels it as SIGINT would and checks every
// port is free again and the sockets are gone.
func TestDev(t *testing.T) {
	etcdAddr, grpcAddr, httpAddr, pgAddr, respAddr := freeport.Addr(t), freeport.Addr(t), freeport.Addr(t), freeport.Addr(t), freeport.Addr(t)
	sockDir := t.TempDir()
	respSock := filepath.Join(sockDir, "fencegate-redis.sock")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{
			"dev", "--etcd-listen=http://" + etcdAddr, "--grpc-addr=" + grpcAddr, "--http-addr=" + httpAddr, "--pg-listen-addr=" + pgAddr, "--redis-listen-addr=" + respAddr,
			"--pg-unix-socket-dir=" + sockDir, "--redis-unix-socket=" + respSock, "--term-sources=mono-*=monotonic",
		}, &stdout, &stderr)
	}()

	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("dev exited early: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev not ready after 90s:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{"export ETCDCTL_ENDPOINTS=http://" + etcdAddr, "FG_HTTP=" + httpAddr, "FG_GRPC=" + grpcAddr, "export DSN='postgres://", "REDIS_PORT="} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("got stdout %q, want the walkthrough's variables, with %q", stdout.String(), want)
		}
	}
	if !strings.Contains(stdout.String(), "PGOPTIONS='-c fencegate.fence=<fence> -c fencegate.token=<token>' psql -h 127.0.0.1 -p "+strings.Split(pgAddr, ":")[1]+" -U "+devRole) {
		t.Errorf("got stdout %q, want the psql line", stdout.String())
	}
	// The listener serves dev's role; without a leader the statement is
	// fencegate's refusal.
	pc, err := pgx.Connect(ctx, "postgres://"+devRole+"@"+pgAddr+"/postgres?sslmode=disable&fencegate.fence=devtest&fencegate.token=1")
	if err != nil {
		t.Fatalf("connect to dev's PostgreSQL listener: %v", err)
	}
	if _, err := pc.Exec(ctx, "SELECT 1"); err == nil || !strings.Contains(err.Error(), "fencegate: ") {
		t.Errorf("got %v, want fencegate's refusal (no leader)", err)
	}
	pc.Close(ctx)
	// So does the RESP listener, to redis-cli.
	respHost, respPort, _ := strings.Cut(respAddr, ":")
	if !strings.Contains(stdout.String(), "redis-cli -h 127.0.0.1 -p "+respPort+" --user <fence> --pass <token>") {
		t.Errorf("got stdout %q, want the redis-cli line", stdout.String())
	}
	if got := redisCli(t, "-h", respHost, "-p", respPort, "--user", "devtest", "--pass", "1", "SET", "{devtest}:k", "v"); !strings.HasPrefix(got, "UNKNOWN_TERM fencegate: ") {
		t.Errorf("redis-cli SET through dev's RESP listener: got %q, want fencegate's refusal (no leader)", got)
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"fencegate_postgres_round_trips_total 0", "fencegate_postgres_batched_writes_total 0",
		"fencegate_redis_round_trips_total 0", "fencegate_redis_batched_writes_total 0",
	} {
		if !strings.Contains(string(metrics), "\n"+name+"\n") {
			t.Errorf("/metrics: no line %q", name)
		}
	}

	// The same listeners on their Unix sockets, to psql and redis-cli as
	// they reach PostgreSQL's and Redis's own (a monotonic fence: any
	// token above the last is a new term).
	pgPort := strings.Split(pgAddr, ":")[1]
	for _, want := range []string{"psql -h " + sockDir + " -p " + pgPort + " -U " + devRole, "redis-cli -s " + respSock + " --user <fence>"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("got stdout %q, want a line with %q", stdout.String(), want)
		}
	}
	psql := exec.CommandContext(ctx, "psql", "-h", sockDir, "-p", pgPort, "-U", devRole, "-Atc", "SELECT 'over the socket'", "postgres")
	psql.Env = append(os.Environ(), "PGOPTIONS=-c fencegate.fence=mono-sock -c fencegate.token=5")
	if out, err := psql.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "over the socket" {
		t.Errorf("psql -h %s -p %s: %v: %s", sockDir, pgPort, err, out)
	}
	if got := redisCli(t, "-s", respSock, "--user", "mono-sock", "--pass", "5", "SET", "{mono-sock}:k", "v"); got != "OK" {
		t.Errorf("redis-cli -s %s SET: got %q, want OK", respSock, got)
	}
	if got := redisCli(t, "-s", respSock, "--user", "mono-sock", "--pass", "4", "SET", "{mono-sock}:k", "stale"); !strings.HasPrefix(got, "STALE_TOKEN fencegate: ") {
		t.Errorf("redis-cli -s %s SET with an older token: got %q, want STALE_TOKEN", respSock, got)
	}

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dev: got %v, want a clean stop", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("dev did not stop within 15s")
	}
	t.Logf("dev stopped in %v", time.Since(start))
	for _, addr := range []string{etcdAddr, grpcAddr, httpAddr, pgAddr} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("port %s still in use after stop: %v", addr, err)
			continue
		}
		l.Close()
	}
	for _, sock := range []string{filepath.Join(sockDir, ".s.PGSQL."+pgPort), respSock} {
		if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket %s after stop: %v, want it removed", sock, err)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestMigrate(t *testing.T) {
	pg, err := throwaway.Start(t.Context(), throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	latest := migrations.Latest()
	for _, want := range []string{
		fmt.Sprintf("fencegate: schema migrated from version 0 to %d\n", latest),
		fmt.Sprintf("fencegate: schema is up to date (version %d)\n", latest),
	} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), []string{"migrate", "--postgres-dsn=" + pg.DSN()}, &stdout, &stderr); err != nil {
			t.Fatalf("migrate: %v\n%s", err, stderr.String())
		}
		if got := stdout.String(); got != want {
			t.Errorf("migrate: got %q, want %q", got, want)
		}
	}
}

// TestServeChecksItsRole: serve refuses to serve PostgreSQL writes as a
// superuser (callers' statements would have its rights) or before the
// schema is migrated, each with one line saying what to run, and starts as
// a role that migrate --runtime-role granted.
func TestServeChecksItsRole(t *testing.T) {
	pg, err := throwaway.Start(t.Context(), throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	etcd, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	admin, err := pgx.Connect(t.Context(), pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.WithoutCancel(t.Context()))
	if _, err := admin.Exec(t.Context(), "CREATE ROLE app LOGIN"); err != nil {
		t.Fatal(err)
	}
	serve := func(dsn string, extra ...string) error {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		args := append([]string{
			"serve", "--etcd-endpoints=" + strings.Join(etcd.Endpoints(), ","),
			"--postgres-dsn=" + dsn, "--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0",
		}, extra...)
		var stdout, stderr syncBuffer
		errc := make(chan error, 1)
		go func() { errc <- run(ctx, args, &stdout, &stderr) }()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			select {
			case err := <-errc:
				return err
			default:
			}
			if strings.Contains(stderr.String(), "fencegate serving") {
				cancel()
				return <-errc
			}
		}
		t.Fatalf("serve %v: neither served nor failed\n%s", extra, stderr.String())
		return nil
	}
	steps := []struct {
		name  string
		dsn   string
		extra []string
		want  string // in the error; "" to serve
	}{
		{"not migrated", pg.DSNAs("app"), nil, "fencegate migrate --postgres-dsn=<an admin DSN> --runtime-role=app"},
		{"migrate at start, as a superuser", pg.DSN(), []string{"--postgres-migrate-dsn=" + pg.DSN()}, "is a superuser"},
		{"superuser with --insecure", pg.DSN(), []string{"--insecure"}, ""},
		{"role not granted", pg.DSNAs("app"), nil, "may not run fencegate's fence check"},
		{"role granted at start", pg.DSNAs("app"), []string{"--postgres-migrate-dsn=" + pg.DSN()}, ""},
		{"role granted before", pg.DSNAs("app"), nil, ""},
		// "$user" on the search path would find schema fencegate.
		{"role named fencegate", pg.DSNAs("fencegate"), []string{"--postgres-migrate-dsn=" + pg.DSN()}, "search_path"},
	}
	if _, err := admin.Exec(t.Context(), "CREATE ROLE fencegate LOGIN"); err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		err := serve(st.dsn, st.extra...)
		switch {
		case st.want == "" && err != nil:
			t.Errorf("%s: got %v, want to serve", st.name, err)
		case st.want != "" && (err == nil || !strings.Contains(err.Error(), st.want)):
			t.Errorf("%s: got %v, want an error containing %q", st.name, err, st.want)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: error %q is more than one line", st.name, err)
		}
	}
}

// TestRedisLogsThroughTheProcessLog: serve with --redis-addr a Unix socket
// nothing listens on fails with one line naming it, and go-redis's own
// line about the failed dial is in fencegate's log (at debug level), not
// written bare to the process's standard error by go-redis's default
// logger.
func TestRedisLogsThroughTheProcessLog(t *testing.T) {
	etcd, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	sock := filepath.Join(t.TempDir(), "redis.sock")
	var stdout, stderr syncBuffer
	err = run(t.Context(), []string{
		"serve", "--etcd-endpoints=" + strings.Join(etcd.Endpoints(), ","), "--redis-addr=" + sock,
		"--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0", "--log-level=debug",
	}, &stdout, &stderr)
	if want := "redis: cannot reach " + sock + ": dial unix " + sock; err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v, want one line containing %q", err, want)
	}
	if log := stderr.String(); !strings.Contains(log, "component=go-redis") || !strings.Contains(log, "dial unix "+sock) {
		t.Errorf("go-redis's line is not in the log:\n%s", log)
	}
}
