package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fencegate/fencegate/election/freeport"
)

// Config configures an embedded etcd server.
type Config struct {
	// Dir is the data directory. Required. Restarting on the same Dir keeps
	// the data.
	Dir string
	// ClientURL is the URL clients connect to, e.g. http://127.0.0.1:2379.
	// Empty means a free port on 127.0.0.1.
	ClientURL string
	// PeerURL is the raft peer URL. Empty means a free port on 127.0.0.1.
	PeerURL string
	// Name is the member name; default "fencegate".
	Name string
	// Logger receives etcd's log entries at level error and above (all
	// levels from info up when Verbose). Nil discards them.
	Logger  *slog.Logger
	Verbose bool
	// NoFsync disables fsync. Faster, and loses data on a machine crash:
	// for tests only.
	NoFsync bool
	// ClientTLS, when not nil, serves clients over TLS only: ClientURL's
	// scheme is then https (an empty ClientURL picks one).
	ClientTLS *ClientTLS
}

// ClientTLS are the files of the client listener's TLS.
type ClientTLS struct {
	CertFile, KeyFile string
	// TrustedCAFile verifies client certificates.
	TrustedCAFile string
	// ClientCertAuth requires a client certificate signed by
	// TrustedCAFile. With etcd auth on, a client that gives no password is
	// then the user named by its certificate's common name.
	ClientCertAuth bool
}

// ErrPortInUse reports that a configured address is taken by another
// process.
var ErrPortInUse = errors.New("embedded etcd: address in use")

// PortInUseError names the address that is in use. It matches ErrPortInUse.
type PortInUseError struct{ Addr string }

func (e *PortInUseError) Error() string { return "embedded etcd: " + e.Addr + " is in use" }

// Is reports whether target is ErrPortInUse.
func (e *PortInUseError) Is(target error) bool { return target == ErrPortInUse }

// Server is a running embedded etcd server.
type Server struct {
	etcd      *embed.Etcd
	clientURL url.URL
	peerURL   url.URL

	mu      sync.Mutex
	grpcs   []*grpc.Server
	closed  bool
	closeMu sync.Mutex
}

// Start starts an etcd server and waits until it serves clients, ctx is
// done (the server is then stopped and ctx's error returned) or the server
// fails to start.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedded etcd: Dir is required")
	}
	if cfg.Name == "" {
		cfg.Name = "fencegate"
	}
	scheme := "http"
	if cfg.ClientTLS != nil {
		scheme = "https"
	}
	// A port picked for the client URL is held until the peer URL has
	// its own: picked one after the other, the kernel may hand out the
	// same free port twice, and etcd then fails to bind the second.
	clientURL, clientHold, err := resolveURL(cfg.ClientURL, scheme)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: client URL: %w", err)
	}
	peerURL, peerHold, err := resolveURL(cfg.PeerURL, "http")
	releasePort(clientHold)
	releasePort(peerHold)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: peer URL: %w", err)
	}
	// etcd's own error for a taken port is a long zap entry and a generic
	// "bind: address already in use"; check first to name the address.
	for _, u := range []url.URL{clientURL, peerURL} {
		if err := checkFree(u.Host); err != nil {
			return nil, err
		}
	}

	s := &Server{clientURL: clientURL, peerURL: peerURL}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{clientURL}
	ec.ListenPeerUrls = []url.URL{peerURL}
	ec.AdvertisePeerUrls = []url.URL{peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(cfg.Name)
	ec.UnsafeNoFsync = cfg.NoFsync
	// Web pages can reach a loopback etcd: embed's defaults serve the
	// JSON gateway (/v3/kv/deleterange takes a no-cors POST), CORS "*"
	// and any Host (DNS rebinding). Clients here speak gRPC.
	ec.EnableGRPCGateway = false
	ec.CORS = map[string]struct{}{clientURL.Scheme + "://" + clientURL.Host: {}} // empty would mean "*"
	ec.HostWhitelist = map[string]struct{}{"localhost": {}, "127.0.0.1": {}, "::1": {}, clientURL.Hostname(): {}}
	if t := cfg.ClientTLS; t != nil {
		ec.ClientTLSInfo.CertFile = t.CertFile
		ec.ClientTLSInfo.KeyFile = t.KeyFile
		ec.ClientTLSInfo.TrustedCAFile = t.TrustedCAFile
		ec.ClientTLSInfo.ClientCertAuth = t.ClientCertAuth
		ec.ClientAutoTLS = false
	}
	ec.LogLevel = "error"
	if cfg.Verbose {
		ec.LogLevel = "info"
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZapLogger(cfg.Logger, cfg.Verbose))
	// Keep the gRPC servers to stop them hard on Close: a graceful stop
	// waits for open watch streams for etcd's request timeout (7 s).
	ec.ServiceRegister = func(gs *grpc.Server) {
		s.mu.Lock()
		s.grpcs = append(s.grpcs, gs)
		s.mu.Unlock()
	}

	e, err := embed.StartEtcd(ec)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("embedded etcd: %s or %s is in use: %w", clientURL.Host, peerURL.Host, err)
		}
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	s.etcd = e
	select {
	case <-e.Server.ReadyNotify():
		return s, nil
	case err := <-e.Err():
		s.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-e.Server.StopNotify():
		s.Close()
		return nil, errors.New("embedded etcd: server stopped while starting")
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("embedded etcd: waiting for readiness: %w", ctx.Err())
	}
}

// Endpoints returns the client endpoints, for clientv3.Config.Endpoints.
func (s *Server) Endpoints() []string { return []string{s.clientURL.String()} }

// ClientURL returns the client URL the server listens on.
func (s *Server) ClientURL() string { return s.clientURL.String() }

// PeerURL returns the peer URL the server listens on.
func (s *Server) PeerURL() string { return s.peerURL.String() }

// Close stops the server. Open client streams are cut as if the server had
// crashed, not drained. Close returns once the server has stopped and its
// ports can be bound again (it gives up waiting for the ports after 10 s).
// Calling Close again does nothing.
func (s *Server) Close() {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.mu.Lock()
	for _, gs := range s.grpcs {
		gs.Stop()
	}
	s.mu.Unlock()
	s.etcd.Close()
	<-s.etcd.Server.StopNotify()
	deadline := time.Now().Add(10 * time.Second)
	for _, u := range []url.URL{s.clientURL, s.peerURL} {
		for checkFree(u.Host) != nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// resolveURL parses raw, which must have scheme, or picks a free loopback
// port when raw is empty; then it also returns the listener holding that
// port, to be closed before the port is bound.
func resolveURL(raw, scheme string) (url.URL, net.Listener, error) {
	if raw == "" {
		// Below the ephemeral range: a restart on the same URLs (Config)
		// must not find the port taken by an outgoing connection, its own
		// clients' reconnects included.
		l, err := freeport.Listen()
		if err != nil {
			return url.URL{}, nil, err
		}
		return url.URL{Scheme: scheme, Host: l.Addr().String()}, l, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return url.URL{}, nil, err
	}
	if u.Scheme != scheme {
		return url.URL{}, nil, fmt.Errorf("%q: scheme must be %s", raw, scheme)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return url.URL{}, nil, fmt.Errorf("%q: %w", raw, err)
	}
	return *u, nil, nil
}

// releasePort closes the listener that held a picked port, if any.
func releasePort(l net.Listener) {
	if l != nil {
		_ = l.Close()
	}
}

func checkFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return &PortInUseError{Addr: addr}
		}
		return fmt.Errorf("embedded etcd: %s: %w", addr, err)
	}
	return l.Close()
}

func newZapLogger(l *slog.Logger, verbose bool) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	minLevel := slog.LevelError
	if verbose {
		minLevel = slog.LevelInfo
	}
	return zap.New(&slogCore{l: l, min: minLevel})
}
