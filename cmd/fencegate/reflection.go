package main

import (
	"context"
	"net"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/proxy/policy"
)

// maxReflectionStreams bounds the server reflection streams open at once,
// server-wide: grpcurl opens one for a call and closes it, but a stream
// lives as long as its client likes, and holds goroutines meanwhile. One
// caller may hold a quarter of them.
const maxReflectionStreams = 64

// streamSlots bounds streams that live as long as their clients like
// (health watches, reflection): at most total open at once, and at most
// perCaller of one caller (its principal, or its address when it has
// none), so that one caller, whatever the policy lets it do, cannot take
// every slot from the others (TestRedTeam28ReadOnlyPrincipalTakesEveryHealthWatch).
type streamSlots struct {
	total, perCaller int
	// authRequired refuses callers with no identity (the server requires
	// one), what names the streams in refusals ("health watches"), and
	// hint says what else to do.
	authRequired bool
	what, hint   string

	mu   sync.Mutex
	open int
	by   map[string]int
}

func newStreamSlots(total int, authRequired bool, what, hint string) *streamSlots {
	return &streamSlots{total: total, perCaller: max(1, total/4), authRequired: authRequired, what: what, hint: hint, by: map[string]int{}}
}

// enter admits a stream of the caller of ctx: UNAUTHENTICATED for a
// caller with no identity where one is required (as its writes are), and
// RESOURCE_EXHAUSTED past the slots. release gives its slot back.
func (s *streamSlots) enter(ctx context.Context) (release func(), err error) {
	if s.authRequired {
		if c := policy.CallerFrom(ctx); c == nil || c.Principal == "" {
			return nil, status.Errorf(codes.Unauthenticated, "fencegate: %s need a verified client certificate or bearer token; %s", s.what, s.hint)
		}
	}
	release, ok := s.take(ctx)
	if !ok {
		return nil, status.Errorf(codes.ResourceExhausted, "fencegate: as many %s are open as this server holds (%d, a quarter of them a caller's); %s, or retry later", s.what, s.total, s.hint)
	}
	return release, nil
}

// take takes a slot for the caller of ctx, and says whether it could.
// release gives it back.
func (s *streamSlots) take(ctx context.Context) (release func(), ok bool) {
	key := callerKey(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open >= s.total || s.by[key] >= s.perCaller {
		return nil, false
	}
	s.open++
	s.by[key]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.open--
		if s.by[key]--; s.by[key] == 0 {
			delete(s.by, key)
		}
	}, true
}

// callerKey names the caller of ctx for streamSlots: its principal, or
// the IP address it connects from when it has no identity.
func callerKey(ctx context.Context) string {
	if c := policy.CallerFrom(ctx); c != nil && c.Principal != "" {
		return "principal " + c.Principal
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		host, _, err := net.SplitHostPort(p.Addr.String())
		if err != nil {
			host = p.Addr.String()
		}
		return "address " + host
	}
	return ""
}

// reflectionBounds is the stream interceptor that holds server reflection
// (grpc.reflection.*) to what health watches are held to: refused to
// callers with no identity where one is required (UNAUTHENTICATED, as
// their writes are; the schema itself is public, in API.md), and past
// maxReflectionStreams at once, a quarter of them one caller's
// (RESOURCE_EXHAUSTED). It runs after the
// authenticator's interceptor, which names the caller.
func reflectionBounds(authRequired bool) grpc.StreamServerInterceptor {
	slots := newStreamSlots(maxReflectionStreams, authRequired, "reflection streams", "the API's schema is in API.md")
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !strings.HasPrefix(info.FullMethod, "/grpc.reflection.") {
			return handler(srv, ss)
		}
		release, err := slots.enter(ss.Context())
		if err != nil {
			return err
		}
		defer release()
		return handler(srv, ss)
	}
}
