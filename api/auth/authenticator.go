package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/fencegate/fencegate/proxy/policy"
)

// AuthErrors set in policy.Caller.AuthError.
const (
	errTokenUnknown = "bearer token not recognised"
	errTokenMany    = "more than one authorization value"
)

// Authenticator establishes who sent a request, from what the transport
// verified only: a client certificate the TLS handshake verified, or a
// bearer secret listed in the token file. It attaches the caller to the
// request's context (policy.NewContext) and refuses nothing; the write
// pipeline refuses an anonymous caller when Required says so.
type Authenticator struct {
	clientCerts bool
	tokens      *reloader[tokenSet] // nil without a token file
	names       principalCache
}

// NewAuthenticator identifies callers by verified client certificates when
// clientCerts is true (--trusted-ca-file is set), and by the bearer tokens
// of tokenFile (--token-auth-file) when it is not empty. The token file is
// loaded now; an error is one line naming it.
func NewAuthenticator(clientCerts bool, tokenFile string, log *slog.Logger, opts ...Option) (*Authenticator, error) {
	a := &Authenticator{clientCerts: clientCerts}
	if tokenFile == "" {
		return a, nil
	}
	o := buildOptions(opts)
	load := func() (*tokenSet, error) {
		if err := o.checkFiles(tokenFlag, tokenFile); err != nil {
			return nil, err
		}
		return loadTokens(tokenFile)
	}
	a.tokens = &reloader[tokenSet]{
		files: []string{tokenFile},
		load:  load,
		now:   o.now,
		log:   orDiscard(log),
		what:  "token file",
	}
	if o.reg != nil {
		errs := prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_token_file_reload_errors_total",
			Help: "Changed token files that could not be loaded; the previous one stays in use.",
		})
		if err := o.reg.Register(errs); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		a.tokens.errs = errs
	}
	if err := a.tokens.start(); err != nil {
		return nil, err
	}
	return a, nil
}

// Required reports whether callers must identify themselves: a CA or a
// token file is configured, so an anonymous caller is to be refused.
func (a *Authenticator) Required() bool { return a.clientCerts || a.tokens != nil }

// Reload reads the token file again now, changed or not (SIGHUP). On error
// the previous tokens stay in use.
func (a *Authenticator) Reload() error {
	if a.tokens == nil {
		return nil
	}
	return a.tokens.reload()
}

// Identify returns the caller of a request that arrived over a connection
// in state (nil without TLS) from peer, with authorization its
// Authorization value ("" when none). A verified client certificate wins;
// else a "Bearer <secret>" listed in the token file; else the caller is
// anonymous. Authorization that names no known token, with a token file
// configured, leaves the caller anonymous with AuthError set.
func (a *Authenticator) Identify(state *tls.ConnectionState, authorization string, peer net.Addr) *policy.Caller {
	if c := a.certCaller(state, peer); c != nil {
		return c
	}
	if authorization == "" {
		return &policy.Caller{Peer: peer}
	}
	return a.tokenCaller(authorization, peer)
}

// certCaller is the caller named by the verified client certificate of
// state, or nil. A chain no longer valid names nobody: the caller is
// anonymous with AuthError set, and no bearer token is looked at.
func (a *Authenticator) certCaller(state *tls.ConnectionState, peer net.Addr) *policy.Caller {
	// VerifiedChains is set by the handshake only, after verifying the
	// chain against the CA bundle; PeerCertificates alone proves nothing.
	if !a.clientCerts || state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return nil
	}
	// The handshake checked the chain once; a connection kept open
	// (gRPC's for days, HTTP keep-alive) outlives it, its certificates'
	// dates and a reload that removed its CA. Checked against time.Now,
	// as a new handshake is (WithClock is the reload's clock).
	if why := ChainsInvalid(state.VerifiedChains, time.Now()); why != "" {
		return &policy.Caller{Peer: peer, AuthError: why}
	}
	p := a.names.of(state.VerifiedChains[0][0])
	if p == "" {
		return nil
	}
	return &policy.Caller{Principal: p, Peer: peer}
}

func (a *Authenticator) tokenCaller(authorization string, peer net.Addr) *policy.Caller {
	c := &policy.Caller{Peer: peer}
	if a.tokens == nil {
		return c // nothing to check it against; anonymous, as without it
	}
	const scheme = "bearer "
	if len(authorization) > len(scheme) && strings.EqualFold(authorization[:len(scheme)], scheme) {
		if p, ok := a.tokens.get().lookup(strings.TrimSpace(authorization[len(scheme):])); ok {
			c.Principal = p
			return c
		}
	}
	c.AuthError = errTokenUnknown
	return c
}

// identifyAll is Identify for a transport that may carry several
// authorization values; more than one is refused rather than guessed at.
func (a *Authenticator) identifyAll(state *tls.ConnectionState, authorization []string, peer net.Addr) *policy.Caller {
	if c := a.certCaller(state, peer); c != nil {
		return c // authorization is not even looked at
	}
	return a.tokenCallerAll(authorization, peer)
}

func (a *Authenticator) tokenCallerAll(authorization []string, peer net.Addr) *policy.Caller {
	switch len(authorization) {
	case 0:
		return &policy.Caller{Peer: peer}
	case 1:
		return a.tokenCaller(authorization[0], peer)
	}
	return &policy.Caller{Peer: peer, AuthError: errTokenMany}
}

// grpcCaller identifies the caller of a gRPC request from its peer (the
// connection's TLS state) and its authorization metadata.
func (a *Authenticator) grpcCaller(ctx context.Context) *policy.Caller {
	var state *tls.ConnectionState
	var addr net.Addr
	if p, ok := peer.FromContext(ctx); ok {
		addr = p.Addr
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			state = &ti.State
		}
	}
	if c := a.certCaller(state, addr); c != nil {
		return c // the metadata is not even read
	}
	return a.tokenCallerAll(metadata.ValueFromIncomingContext(ctx, "authorization"), addr)
}

// UnaryServerInterceptor attaches the caller to every unary call's
// context, replacing anything already there.
func (a *Authenticator) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(policy.NewContext(ctx, a.grpcCaller(ctx)), req)
	}
}

// StreamServerInterceptor attaches the caller to every stream's context,
// replacing anything already there.
func (a *Authenticator) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		return handler(srv, &callerStream{ServerStream: ss, ctx: policy.NewContext(ctx, a.grpcCaller(ctx))})
	}
}

type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *callerStream) Context() context.Context { return s.ctx }

// Headers that carry a secret toward the gRPC handlers: grpc-gateway
// forwards Authorization, and Grpc-Metadata-Authorization, as the
// authorization metadata.
const (
	hdrAuthorization     = "Authorization"
	hdrGatewayAuthorized = "Grpc-Metadata-Authorization"
)

// HTTPMiddleware attaches the caller of each request, from r.TLS and its
// Authorization header, to its context, and removes the secret from the
// request before next sees it, so that nothing downstream (grpc-gateway
// forwards it as metadata) holds or logs it. It refuses nothing.
func (a *Authenticator) HTTPMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vals := r.Header[hdrAuthorization]
		c := a.identifyAll(r.TLS, vals, httpPeer(r.RemoteAddr))
		r = r.WithContext(policy.NewContext(r.Context(), c))
		if len(vals) > 0 || len(r.Header[hdrGatewayAuthorized]) > 0 {
			// A copy: the header map belongs to the caller's request.
			r.Header = r.Header.Clone()
			delete(r.Header, hdrAuthorization)
			delete(r.Header, hdrGatewayAuthorized)
		}
		next.ServeHTTP(w, r)
	})
}

// httpPeer is an HTTP request's RemoteAddr as a net.Addr.
type httpPeer string

func (httpPeer) Network() string  { return "tcp" }
func (p httpPeer) String() string { return string(p) }

// maxCachedNames bounds principalCache; past it the cache starts afresh.
const maxCachedNames = 1024

// principalCache remembers PrincipalOf by certificate content, so that
// naming the caller of a request over a known certificate allocates
// nothing. Keyed by the DER bytes, not the pointer: each connection parses
// its own copy, and a freed pointer's address can be reused.
type principalCache struct {
	m  atomic.Pointer[map[string]string]
	mu sync.Mutex // one writer at a time; readers never wait
}

func (c *principalCache) of(cert *x509.Certificate) string {
	if m := c.m.Load(); m != nil {
		if p, ok := (*m)[string(cert.Raw)]; ok {
			return p
		}
	}
	p := PrincipalOf(cert)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	n := make(map[string]string, 1)
	if old != nil && len(*old) < maxCachedNames {
		n = make(map[string]string, len(*old)+1)
		for k, v := range *old {
			n[k] = v
		}
	}
	n[string(cert.Raw)] = p
	c.m.Store(&n)
	return p
}
