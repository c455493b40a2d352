package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/proxy/policy"
)

// TestHealthWatchBounds: where an identity is required, a caller without
// one may Check but not Watch; past maxHealthWatches open watches, the
// next is refused until one ends.
func TestHealthWatchBounds(t *testing.T) {
	r := newReadiness(prometheus.NewRegistry(), slog.New(slog.DiscardHandler), true, func(context.Context) error { return nil })
	gs := grpc.NewServer(grpc.ChainStreamInterceptor(saidPrincipal))
	r.register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	watch := func(ctx context.Context, principal string) error {
		t.Helper()
		if principal != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-test-principal", principal)
		}
		s, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Recv()
		return err
	}

	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("anonymous Check: got %v, want an answer", err)
	}
	if got := status.Code(watch(ctx, "")); got != codes.Unauthenticated {
		t.Errorf("anonymous Watch: got %v, want %v", got, codes.Unauthenticated)
	}
	fillStreamSlots(t, maxHealthWatches, "Watch", watch)
}

// saidPrincipal is a hand-written stand-in for the authenticator's
// stream interceptor: the principal is what the client says it is
// (x-test-principal). What is tested is what the bounds do with it.
func saidPrincipal(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c := &policy.Caller{}
	if v := metadata.ValueFromIncomingContext(ss.Context(), "x-test-principal"); len(v) > 0 {
		c.Principal = v[0]
	}
	return handler(srv, &callerServerStream{ss, policy.NewContext(ss.Context(), c)})
}

// fillStreamSlots holds streamSlots of total to their bounds through
// open, which opens a stream as principal and returns once it is
// answered (nil) or refused: one caller holds at most a quarter, four
// fill them all, a fifth is refused, and once one stream ends another
// opens.
func fillStreamSlots(t *testing.T, total int, what string, open func(ctx context.Context, principal string) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	per := total / 4
	first, endFirst := context.WithCancel(ctx)
	if err := open(first, "token:c0"); err != nil {
		t.Fatalf("%s with an identity: %v", what, err)
	}
	for i := range 4 {
		n := per
		if i == 0 {
			n--
		}
		for range n {
			if err := open(ctx, fmt.Sprintf("token:c%d", i)); err != nil {
				t.Fatalf("%s of token:c%d: %v", what, i, err)
			}
		}
		if got := status.Code(open(ctx, fmt.Sprintf("token:c%d", i))); got != codes.ResourceExhausted {
			t.Errorf("%s %d of token:c%d: got %v, want %v", what, per+1, i, got, codes.ResourceExhausted)
		}
	}
	if got := status.Code(open(ctx, "token:other")); got != codes.ResourceExhausted {
		t.Errorf("%s %d: got %v, want %v", what, total+1, got, codes.ResourceExhausted)
	}
	endFirst()
	for {
		err := open(ctx, "token:other")
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s once one ended: got %v, want an answer", what, err)
		}
	}
}

type callerServerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *callerServerStream) Context() context.Context { return s.ctx }
