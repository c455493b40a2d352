package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/election/freeport"
)

// TestDevStaysReady runs `fencegate dev` with JSON logs and leaves it idle:
// no election, no key under the prefix, no write to etcd at all. /readyz
// must answer 200 and the gRPC health service SERVING all along (the
// election watch once gave up on an idle etcd every 4 s, and /readyz
// answered 503 meanwhile). FENCEGATE_TEST_IDLE_WATCH sets how long (20s by
// default). Then it stops dev and checks the health service said
// NOT_SERVING, and that durations in the JSON log are text.
func TestDevStaysReady(t *testing.T) {
	idle := 20 * time.Second
	if s := os.Getenv("FENCEGATE_TEST_IDLE_WATCH"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("FENCEGATE_TEST_IDLE_WATCH=%q: %v", s, err)
		}
		idle = d
	}
	etcdAddr, grpcAddr, httpAddr := freeport.Addr(t), freeport.Addr(t), freeport.Addr(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{
			"dev", "--log-format=json", "--etcd-listen=http://" + etcdAddr,
			"--grpc-addr=" + grpcAddr, "--http-addr=" + httpAddr, "--pg-listen-addr=" + freeport.Addr(t), "--redis-listen-addr=" + freeport.Addr(t),
		}, &stdout, &stderr)
	}()
	waitReady(t, httpAddr, done, &stderr)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	checkHealth := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		resp, err := health.Check(cctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health check %q: %v", service, err)
		}
		return resp.GetStatus()
	}
	// Not from ctx: a load balancer's watch outlives fencegate's shutdown.
	wctx, wcancel := context.WithCancel(t.Context())
	defer wcancel()
	watch, err := health.Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health watch: got %v, %v, want SERVING", resp.GetStatus(), err)
	}
	watched := make(chan healthpb.HealthCheckResponse_ServingStatus, 16)
	watchErr := make(chan error, 1)
	go func() {
		defer close(watched)
		for {
			resp, err := watch.Recv()
			if err != nil {
				watchErr <- err
				return
			}
			watched <- resp.GetStatus()
		}
	}()

	t.Logf("dev idle for %v (FENCEGATE_TEST_IDLE_WATCH to change)", idle)
	client := &http.Client{Timeout: 5 * time.Second}
	checks := 0
	for end := time.Now().Add(idle); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		resp, err := client.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			t.Fatalf("/readyz: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/readyz after %v idle: got %d %q, want 200\n%s", idle-time.Until(end), resp.StatusCode, body, stderr.String())
		}
		if checks++; checks%10 == 0 {
			for _, svc := range []string{"", "fencegate.v1.Gateway"} {
				if got := checkHealth(svc); got != healthpb.HealthCheckResponse_SERVING {
					t.Fatalf("health %q: got %v, want SERVING", svc, got)
				}
			}
		}
		select {
		case st := <-watched:
			t.Fatalf("health watch: got %v while idle, want no change from SERVING", st)
		default:
		}
	}
	metrics := get(t, "http://"+httpAddr+"/metrics")
	if !strings.Contains(metrics, "\nfencegate_ready 1\n") {
		t.Errorf("/metrics: no line %q", "fencegate_ready 1")
	}

	// The open health watch must not hold the shutdown up for the whole
	// --shutdown-timeout (10s).
	stopStart := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dev: got %v, want a clean stop", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dev did not stop within 30s")
	}
	if took := time.Since(stopStart); took > 5*time.Second {
		t.Errorf("dev took %v to stop with a health watch open, want under 5s", took)
	}
	var statuses []healthpb.HealthCheckResponse_ServingStatus
	for st := range watched {
		statuses = append(statuses, st)
	}
	if len(statuses) == 0 || statuses[0] != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health watch at shutdown: got %v, want NOT_SERVING first", statuses)
	}
	if err := <-watchErr; status.Code(err) != codes.Unavailable {
		t.Errorf("health watch at shutdown: got end %v, want Unavailable", err)
	}

	var sawDuration bool
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		for _, bad := range []string{"election watch interrupted; listing again", "not ready"} {
			if rec["msg"] == bad {
				t.Errorf("log while idle: %s", line)
			}
		}
		if rec["msg"] == "shutting down" {
			sawDuration = true
			if got, want := rec["timeout"], "10s"; got != want {
				t.Errorf("shutting down: got timeout %#v, want %q", got, want)
			}
		}
	}
	if !sawDuration {
		t.Errorf("no \"shutting down\" line in the log:\n%s", stderr.String())
	}
}

// waitReady waits until /readyz answers 200, or fails the test if dev
// exits or 60 s pass.
func waitReady(t *testing.T, httpAddr string, done <-chan error, stderr *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-done:
			t.Fatalf("dev exited early: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev not ready after 60s:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
