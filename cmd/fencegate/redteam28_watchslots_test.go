package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
)

// TestRedTeam28ReadOnlyPrincipalTakesEveryHealthWatch
//
// Attack: serve requires an identity (--token-auth-file) and has a
// policy. Principal token:ops may only read fences (fence.read); it may
// write nothing. It opens health watches (grpc.health.v1.Health/Watch),
// which it may: it has an identity. 1024 of them, on two connections, held
// open. A worker (token:worker, sql.write on fence a) then connects as gRPC
// clients are told to, with client-side health checking
// (healthCheckConfig in its service config: health.go says Watch is for
// exactly that, "one per connection"), and writes.
//
// What happened (on this code): round 25's bound on watches is one count
// for the whole server, 1024, with no share per caller or per connection:
// the read-only principal takes every slot, and keeps them as long as it
// likes (a watch never ends). The worker's health watch is refused
// RESOURCE_EXHAUSTED, which grpc-go's client health checking takes as an
// unhealthy server (TRANSIENT_FAILURE: only UNIMPLEMENTED counts as
// healthy): the worker's write fails UNAVAILABLE, nothing reaches the
// pipeline, for as long as the watches stay open, on every replica the
// principal does this to. The same holds for the 64 reflection slots
// (reflectionBounds), which any identity may take from operators' grpcurl.
//
// What should happen: a bound one caller cannot fill for everyone: slots
// per principal (and per connection) well under the total, so that a
// caller holding its share is refused, not the next worker; or watches
// that end (a maximum age) so that slots come back.
//
// Severity: medium (any identity, even one the policy lets do nothing,
// stops every health-checking client's writes through a replica for as
// long as it likes).
func TestRedTeam28ReadOnlyPrincipalTakesEveryHealthWatch(t *testing.T) {
	e := newSecureEnv(t)
	hexsum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tokens := e.writeFile(t, "tokens", "ops "+hexsum("ops-secret")+"\nworker "+hexsum("worker-secret")+"\n")
	pol := e.writeFile(t, "policy.yaml", `rules:
  - name: ops-read
    principals: ["token:ops"]
    fences: ["*"]
    actions: [fence.read]
  - name: a-writer
    principals: ["token:worker"]
    fences: ["a"]
    actions: [sql.write]
    postgres_role: a_writer
`)
	g := e.serveGateway(t, "--token-auth-file="+tokens, "--policy-file="+pol)
	term := e.lead(t, "a", "worker-1")

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// A worker as gRPC documents it: round_robin with client-side health
	// checking, the service "" (the whole server).
	const serviceConfig = `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`
	write := func() error {
		// The bearer token as per-RPC credentials of the connection, so
		// that its health watch carries it too.
		conn, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(rt28Bearer("worker-secret")), grpc.WithDefaultServiceConfig(serviceConfig))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		return execSQL(wctx, fencegatev1.NewGatewayClient(conn), "a", term, "INSERT INTO a_t VALUES ('x')")
	}
	// Before: once the replica is ready (SERVING), the worker writes.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := write()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker's write, before: %v", err)
		}
	}

	// token:ops, which may write nothing, holds watches.
	octx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer ops-secret")
	held := 0
	for range 2 {
		conn, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		hc := healthpb.NewHealthClient(conn)
		for range maxHealthWatches / 2 {
			s, err := hc.Watch(octx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(); err != nil {
				t.Logf("watch %d refused: %v", held+1, err)
				break
			}
			held++
		}
	}
	t.Logf("token:ops (fence.read only) holds %d health watches", held)

	err := write()
	if err != nil {
		t.Errorf("HOLE: with %d health watches held by token:ops, which the policy lets write nothing, the worker's write through a health-checking client failed: %v (%s)", held, err, status.Code(err))
	}
	if status.Code(err) == codes.OK {
		t.Logf("the worker's write went through")
	}
}

// rt28Bearer is a bearer token as gRPC per-RPC credentials, over a
// loopback connection without TLS.
type rt28Bearer string

func (b rt28Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (rt28Bearer) RequireTransportSecurity() bool { return false }
