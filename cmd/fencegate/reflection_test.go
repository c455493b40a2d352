package main

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// TestReflectionBounds: where an identity is required, a caller without
// one is refused server reflection; past maxReflectionStreams open
// streams, the next is refused until one ends.
func TestReflectionBounds(t *testing.T) {
	gs := grpc.NewServer(grpc.ChainStreamInterceptor(saidPrincipal, reflectionBounds(true)))
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
	fillStreamSlots(t, maxReflectionStreams, "reflection stream", list)
}
