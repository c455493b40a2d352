package resp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
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
	// WriteTimeout bounds writing replies to a client that does not read
	// them; 0 means 30 s.
	WriteTimeout time.Duration
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
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 30 * time.Second
	}
	return c
}

// Server serves RESP in front of the gateway's Redis backend.
type Server struct {
	gw      *proxy.Gateway
	cfg     Config
	log     *slog.Logger
	ids     atomic.Int64
	open    atomic.Int64    // connections being served
	refused atomic.Uint64   // closed at MaxConnections
	ctx     context.Context // cancelled by Close: aborts writes in flight
	cancel  context.CancelFunc

	mu      sync.Mutex
	lis     map[net.Listener]struct{}
	conns   map[*session]struct{}
	closing bool
	connsWG sync.WaitGroup
	// shut mirrors closing for sessions, which must not take mu.
	shut atomic.Bool
}

// New returns a Server running every data command through gw.
func New(gw *proxy.Gateway, cfg Config) (*Server, error) {
	if gw == nil {
		return nil, errors.New("resp: no gateway")
	}
	cfg = cfg.withDefaults()
	switch {
	case cfg.MaxArgs < 1, cfg.MaxBulkBytes < 1, cfg.MaxInlineBytes < 1, cfg.MaxQueued < 1, cfg.MaxPipelineBatch < 1, cfg.MaxConnections < 1:
		return nil, errors.New("resp: limits must be positive")
	case cfg.MaxCommandBytes < cfg.MaxBulkBytes:
		return nil, fmt.Errorf("resp: MaxCommandBytes %d is below MaxBulkBytes %d", cfg.MaxCommandBytes, cfg.MaxBulkBytes)
	}
	if cfg.TLS != nil {
		// Redis clients negotiate no ALPN protocol; the HTTP ones of the
		// shared config would be wrong here.
		cfg.TLS = cfg.TLS.Clone()
		cfg.TLS.NextProtos = nil
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		gw: gw, cfg: cfg, log: log, ctx: ctx, cancel: cancel,
		lis: map[net.Listener]struct{}{}, conns: map[*session]struct{}{},
	}, nil
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("resp: server closed")

// Serve accepts connections on lis until Shutdown or Close.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.lis[lis] = struct{}{}
	s.mu.Unlock()
	var acc listen.Acceptor
	for {
		c, err := acc.Accept(lis, s.closingNow)
		switch {
		case errors.Is(err, listen.ErrClosing):
			return ErrServerClosed
		case err != nil:
			return fmt.Errorf("resp: accept: %w", err)
		}
		if s.open.Add(1) > int64(s.cfg.MaxConnections) {
			s.open.Add(-1)
			s.refuse(c)
			continue
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			s.open.Add(-1)
			c.Close()
			return ErrServerClosed
		}
		s.connsWG.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.connsWG.Done()
			defer s.open.Add(-1)
			s.handle(c)
		}()
	}
}

// refuse closes a connection over MaxConnections, telling a plain-text
// client why as Redis does.
func (s *Server) refuse(c net.Conn) {
	s.refused.Add(1)
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
	conn := c
	if s.cfg.TLS != nil {
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
		}
		conn = tc
	}
	if caller.Principal == "" {
		caller.AuthError = "no verified client certificate (RESP clients are identified by their TLS client certificate)"
	}
	sess := newSession(proxy.WithProtocol(policy.NewContext(s.ctx, caller), proxy.ProtocolRESP), s, conn)
	if !s.track(sess, true) {
		return
	}
	defer s.track(sess, false)
	if err := sess.serve(); err != nil {
		s.log.Debug("resp: connection closed", "peer", c.RemoteAddr().String(), "err", err)
	}
}

// Connections returns the client connections open and how many were
// refused at MaxConnections.
func (s *Server) Connections() (open int64, refused uint64) {
	return s.open.Load(), s.refused.Load()
}

// Shutdown stops accepting connections, closes idle ones at once and every
// other one once it has answered what it read, and waits for them until ctx
// is done; then it closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopListening()
	for c := range s.conns {
		c.closeIfIdle()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.connsWG.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Close()
		<-done
		return ctx.Err()
	}
}

// Close closes the listeners and every connection now; writes in flight
// are abandoned (their outcome is unknown to their clients).
func (s *Server) Close() error {
	s.mu.Lock()
	s.stopListening()
	for c := range s.conns {
		c.conn.Close()
	}
	s.mu.Unlock()
	s.cancel()
	return nil
}

// stopListening is called with mu held.
func (s *Server) stopListening() {
	if s.closing {
		return
	}
	s.closing = true
	s.shut.Store(true)
	for l := range s.lis {
		l.Close()
	}
}

func (s *Server) track(c *session, on bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		if s.closing {
			return false
		}
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	return true
}

func (s *Server) closingNow() bool { return s.shut.Load() }
