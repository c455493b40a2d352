package main

import (
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/proxy/policy"
)

// maxReflectionStreams bounds the server reflection streams open at once,
// server-wide: grpcurl opens one for a call and closes it, but a stream
// lives as long as its client likes, and holds goroutines meanwhile.
const maxReflectionStreams = 64

// reflectionBounds is the stream interceptor that holds server reflection
// (grpc.reflection.*) to what health watches are held to: refused to
// callers with no identity where one is required (UNAUTHENTICATED, as
// their writes are; the schema itself is public, in API.md), and past
// maxReflectionStreams at once (RESOURCE_EXHAUSTED). It runs after the
// authenticator's interceptor, which names the caller.
func reflectionBounds(authRequired bool) grpc.StreamServerInterceptor {
	slots := make(chan struct{}, maxReflectionStreams)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !strings.HasPrefix(info.FullMethod, "/grpc.reflection.") {
			return handler(srv, ss)
		}
		if authRequired {
			if c := policy.CallerFrom(ss.Context()); c == nil || c.Principal == "" {
				return status.Error(codes.Unauthenticated, "fencegate: server reflection needs a verified client certificate or bearer token (the API's schema is in API.md)")
			}
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			return status.Errorf(codes.ResourceExhausted, "fencegate: %d reflection streams are open, the most this server holds; retry later", maxReflectionStreams)
		}
		return handler(srv, ss)
	}
}
