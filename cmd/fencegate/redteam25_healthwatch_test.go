package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestRedTeam25AnonymousHealthWatchesHoldGoroutines
//
// Attack: serve requires an identity (--trusted-ca-file with
// --token-auth-file: a client shows a certificate or a bearer token; every
// write without one is UNAUTHENTICATED). A client with neither connects to
// the gRPC port over TLS, which the handshake allows, and opens
// grpc.health.v1.Health/Watch streams, 1000 on each of two connections,
// sending their request and never closing them.
//
// What happened (on this code): every stream is served and held for as
// long as the client likes: Watch needs no identity, round 18's
// first-message deadline is lifted once the request has come (for Watch and
// reflection's stream on purpose), and the gRPC port has no keepalive
// enforcement, MaxConnectionAge, connection limit or per-caller bound. Each
// watch holds two goroutines (the handler and healthService.Watch's drain
// waiter) and the health server's per-watch state: 2000 watches grew the
// process by thousands of goroutines, and a client scales it with
// connections (1024 streams each) at no cost but sockets. It is round
// 18's hole (streams held for ever by a client with no identity) through
// the stream its fix exempted.
//
// What should happen: streams that live on need a bound a client without
// an identity cannot lift: Watch refused (or capped, per connection and in
// total) for callers the gateway would refuse UNAUTHENTICATED, and a
// MaxConnectionAge / keepalive policy on the gRPC port, as the HTTP port
// has its timeouts.
//
// Severity: medium (memory and goroutines of a replica that requires
// authentication grown without bound by anyone reaching its gRPC port).
func TestRedTeam25AnonymousHealthWatchesHoldGoroutines(t *testing.T) {
	e := newSecureEnv(t)
	sum := sha256.Sum256([]byte("cron-secret"))
	tokensFile := e.writeFile(t, "tokens", "cron "+hex.EncodeToString(sum[:])+"\n")
	g := e.serveGateway(t, "--cert-file="+e.srv.CertFile, "--key-file="+e.srv.KeyFile, "--trusted-ca-file="+e.ca.File,
		"--token-auth-file="+tokensFile)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	before := runtime.NumGoroutine()
	const conns, perConn = 2, 1000
	var held []grpc.ClientStream
	refused := 0
	for range conns {
		// No client certificate, no bearer token.
		conn, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(e.ca.ClientTLS(nil))))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		hc := healthpb.NewHealthClient(conn)
		for range perConn {
			s, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			if _, err := s.Recv(); err != nil {
				// The defence this test asks for: the watch refused.
				if c := status.Code(err); c == codes.Unauthenticated || c == codes.ResourceExhausted {
					refused++
					continue
				}
				t.Fatalf("watch: first answer: %v", err)
			}
			held = append(held, s)
		}
	}
	time.Sleep(500 * time.Millisecond)
	grown := runtime.NumGoroutine() - before
	t.Logf("%d anonymous health watches on %d connections (%d more refused): %d more goroutines in the process", len(held), conns, refused, grown)
	// The client side holds about one goroutine per stream of its own;
	// the rest is the server's.
	if server := grown - len(held); server > 500 {
		t.Errorf("HOLE: %d health watches from a client with no certificate or token (every write of which is UNAUTHENTICATED) hold about %d server goroutines, without bound or end", len(held), server)
	}
}
