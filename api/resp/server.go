package resp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/api/internal/listen"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
)

// Config configures a Server. Zero values take the defaults noted.
type Config struct {
	// TLS, when set, makes every connection TLS (Redis has no in-band
	// upgrade); a verified client certificate names the principal.
	TLS *tls.Config
	// MaxFenceName is the longest fence name AUTH accepts; 0 means
	// proxy's default.
	MaxFenceName int
	// MaxQueued is the most commands MULTI queues (one write's commands:
	// proxy.Config.MaxStatements); 0 means proxy's default.
	MaxQueued int
	// MaxPipelineBatch is the most pipelined commands sent as one write;
	// 0 means 16, and it is capped at MaxQueued.
	MaxPipelineBatch int
	// MaxArgs is the most arguments of one command; 0 means 4096.
	MaxArgs int
	// MaxBulkBytes is the largest argument; 0 means 1 MiB. A larger one
	// is a protocol error and closes the connection.
	MaxBulkBytes int
	// MaxCommandBytes bounds the arguments of one command together, and
	// of one pipelined batch; 0 means 8 MiB.
	MaxCommandBytes int
	// MaxInlineBytes is the longest inline command; 0 means 64 KiB.
	MaxInlineBytes int
	// MaxConnections bounds the open client connections, as Redis's
	// maxclients does; 0 means 10000. One more gets "-ERR max number of
	// clients reached" (plain text only) and is closed.
	MaxConnections int
	// HandshakeTimeout bounds a TLS handshake; 0 means 10 s.
	HandshakeTimeout time.Duration
	// AuthTimeout bounds how long a connection may go without AUTH, from
	// its start or from RESET; 0 means 30 s, the PostgreSQL listener's
	// StartupTimeout. Past it the client gets an error and the connection
	// closes, so clients that never log in cannot keep the connections
	// MaxConnections allows from those that do.
	AuthTimeout time.Duration
	// WriteTimeout bounds writing replies to a client that does not read
	// them; 0 means 30 s.
	WriteTimeout time.Duration
	// MaxReadAheadBytes bounds what a logged-in client has sent that the
	// listener reads and holds, not yet run, while it waits to write the
	// replies of earlier commands; 0 means 64 MiB (16 KiB before AUTH).
	// A client that writes its whole pipeline before reading any reply
	// completes it if it fits; past it, the listener stops reading, and
	// closes the connection if the client then reads nothing for
	// WriteTimeout, as Redis closes a client over its output buffer
	// limit.
	MaxReadAheadBytes int
	// Logger receives connection errors; nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	def := proxy.DefaultConfig()
	if c.MaxFenceName == 0 {
		c.MaxFenceName = def.MaxFenceName
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = def.MaxStatements
	}
	if c.MaxPipelineBatch == 0 {
		c.MaxPipelineBatch = 16
	}
	c.MaxPipelineBatch = min(c.MaxPipelineBatch, c.MaxQueued)
	if c.MaxArgs == 0 {
		c.MaxArgs = 4096
	}
	if c.MaxBulkBytes == 0 {
		c.MaxBulkBytes = 1 << 20
	}
	if c.MaxCommandBytes == 0 {
		c.MaxCommandBytes = 8 << 20
	}
	if c.MaxInlineBytes == 0 {
		c.MaxInlineBytes = 64 << 10
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = 10000
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.AuthTimeout == 0 {
		c.AuthTimeout = 30 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.MaxReadAheadBytes == 0 {
		c.MaxReadAheadBytes = 64 << 20
	}
	return c
}

// Server serves RESP in front of the gateway's Redis backend.
type Server struct {
	gw     *proxy.Gateway
	cfg    Config
	log    *slog.Logger
	ids    atomic.Int64
	ctx    context.Context // cancelled by Close: aborts writes in flight
	cancel context.CancelFunc
	conns  listen.Group[*session]

	// testHookCommand, if set, runs as a session is about to run a
	// command it read.
	testHookCommand func(args []string)
}

// New returns a Server running every data command through gw.
func New(gw *proxy.Gateway, cfg Config) (*Server, error) {
	if gw == nil {
		return nil, errors.New("resp: no gateway")
	}
	cfg = cfg.withDefaults()
	switch {
	case cfg.MaxArgs < 1, cfg.MaxBulkBytes < 1, cfg.MaxInlineBytes < 1, cfg.MaxQueued < 1, cfg.MaxPipelineBatch < 1, cfg.MaxConnections < 1, cfg.MaxReadAheadBytes < 1:
		return nil, errors.New("resp: limits must be positive")
	case cfg.MaxCommandBytes < cfg.MaxBulkBytes:
		return nil, fmt.Errorf("resp: MaxCommandBytes %d is below MaxBulkBytes %d", cfg.MaxCommandBytes, cfg.MaxBulkBytes)
	}
	if cfg.TLS != nil {
		// Redis clients negotiate no ALPN protocol; the HTTP ones of the
		// shared config would be wrong here.
		// Nor the ones a config for each handshake carries (auth's
		// ServerTLS hands out its loaded one): a browser offering h2
		// would get it, and an HTTP/2 POST's body would run as commands,
		// past the POST and Host: lines HTTP/1 has (crossProtocol).
		base := cfg.TLS
		cfg.TLS = base.Clone()
		cfg.TLS.NextProtos = nil
		if get := base.GetConfigForClient; get != nil {
			cfg.TLS.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
				c, err := get(h)
				if c != nil {
					c = c.Clone()
					c.NextProtos = nil
				}
				return c, err
			}
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		gw: gw, cfg: cfg, log: log, ctx: ctx, cancel: cancel,
	}, nil
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("resp: server closed")

// Serve accepts connections on lis until Shutdown or Close.
func (s *Server) Serve(lis net.Listener) error {
	err := s.conns.Serve(lis,
		func(open int64) bool { return open <= int64(s.cfg.MaxConnections) },
		s.refuse,
		func(c net.Conn, _ int64) { s.handle(c) })
	if errors.Is(err, listen.ErrClosing) {
		return ErrServerClosed
	}
	return fmt.Errorf("resp: accept: %w", err)
}

// refuse closes a connection over MaxConnections, telling a plain-text
// client why as Redis does.
func (s *Server) refuse(c net.Conn) {
	if s.cfg.TLS == nil {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte("-ERR max number of clients reached\r\n"))
	}
	c.Close()
	s.log.Debug("resp: connection refused: max number of clients reached", "peer", c.RemoteAddr().String(), "limit", s.cfg.MaxConnections)
}

// handle runs one connection: TLS when configured, then the session.
func (s *Server) handle(c net.Conn) {
	defer c.Close()
	caller := &policy.Caller{Peer: c.RemoteAddr()}
	var certUntil time.Time
	var chains [][]*x509.Certificate
	conn := c
	unix := c.LocalAddr().Network() == "unix"
	if s.cfg.TLS != nil && !unix { // Redis has no TLS on its Unix socket either
		tc := tls.Server(c, s.cfg.TLS)
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.HandshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			s.log.Debug("resp: TLS handshake", "peer", c.RemoteAddr().String(), "err", err)
			return
		}
		if st := tc.ConnectionState(); len(st.VerifiedChains) > 0 && len(st.VerifiedChains[0]) > 0 {
			caller.Principal = auth.PrincipalOf(st.VerifiedChains[0][0])
			certUntil = auth.ChainNotAfter(st.VerifiedChains)
			chains = st.VerifiedChains
		}
		conn = tc
	}
	switch {
	case caller.Principal != "":
	case unix:
		caller.AuthError = "no client certificate on a Unix socket (RESP clients are identified by their TLS client certificate: connect over TLS)"
	default:
		caller.AuthError = "no verified client certificate (RESP clients are identified by their TLS client certificate)"
	}
	sess := newSession(proxy.WithProtocol(policy.NewContext(s.ctx, caller), proxy.ProtocolRESP), s, conn)
	sess.raw, sess.certUntil, sess.chains = c, certUntil, chains
	if !s.conns.Track(sess, true) {
		return
	}
	defer s.conns.Track(sess, false)
	// A panic (a bug) ends this connection alone, as net/http keeps
	// serving after a handler panics: the client's command in flight has
	// an unknown outcome, as with any connection closed under it.
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("resp: internal error; the connection is closed", "panic", v, "peer", c.RemoteAddr().String(), "stack", string(debug.Stack()))
		}
	}()
	if err := sess.serve(); err != nil {
		s.log.Debug("resp: connection closed", "peer", c.RemoteAddr().String(), "err", err)
	}
}

// Connections returns the client connections open and how many were
// refused at MaxConnections.
func (s *Server) Connections() (open int64, refused uint64) { return s.conns.Connections() }

// Shutdown stops accepting connections, closes idle ones at once and every
// other one once it has answered what it read, and waits for them until ctx
// is done; then it closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	return s.conns.Shutdown(ctx, func() { _ = s.Close() })
}

// Close closes the listeners and every connection now; writes in flight
// are abandoned (their outcome is unknown to their clients).
func (s *Server) Close() error {
	s.conns.Close()
	s.cancel()
	return nil
}
