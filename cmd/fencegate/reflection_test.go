package main

import (
	"context"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/proxy/policy"
)

// TestReflectionBounds: where an identity is required, a caller without
// one is refused server reflection; past maxReflectionStreams open
// streams, the next is refused until one ends.
func TestReflectionBounds(t *testing.T) {
	// The principal is what the client says, as in TestHealthWatchBounds:
	// what is tested is what the bound does with it.
	identify := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		c := &policy.Caller{}
		if v := metadata.ValueFromIncomingContext(ss.Context(), "x-test-principal"); len(v) > 0 {
			c.Principal = v[0]
		}
		return handler(srv, &callerServerStream{ss, policy.NewContext(ss.Context(), c)})
	}
	gs := grpc.NewServer(grpc.ChainStreamInterceptor(identify, reflectionBounds(true)))
	reflection.Register(gs)
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
	rc := reflectionpb.NewServerReflectionClient(conn)
	list := func(ctx context.Context, principal string) error {
		t.Helper()
		if principal != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-test-principal", principal)
		}
		s, err := rc.ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if got := status.Code(list(ctx, "")); got != codes.Unauthenticated {
		t.Errorf("anonymous reflection: got %v, want %v", got, codes.Unauthenticated)
	}
	per := maxReflectionStreams / 4
	first, endFirst := context.WithCancel(ctx)
	if err := list(first, "token:ops0"); err != nil {
		t.Fatalf("reflection with an identity: %v", err)
	}
	for i := range 4 {
		n := per
		if i == 0 {
			n--
		}
		for range n {
			if err := list(ctx, fmt.Sprintf("token:ops%d", i)); err != nil {
				t.Fatalf("reflection of token:ops%d: %v", i, err)
			}
		}
		if got := status.Code(list(ctx, fmt.Sprintf("token:ops%d", i))); got != codes.ResourceExhausted {
			t.Errorf("stream %d of token:ops%d: got %v, want %v", per+1, i, got, codes.ResourceExhausted)
		}
	}
	if got := status.Code(list(ctx, "token:other")); got != codes.ResourceExhausted {
		t.Errorf("stream %d: got %v, want %v", maxReflectionStreams+1, got, codes.ResourceExhausted)
	}
	endFirst()
	for {
		err := list(ctx, "token:other")
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("after one stream ended: %v", err)
		}
	}
}
