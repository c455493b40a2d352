// Package pgwire is fencegate's PostgreSQL wire-protocol listener: unmodified
// PostgreSQL clients (psql, pgx, libpq, JDBC, ...) connect to it as to the
// database itself, and every transaction they run is fenced (API.md,
// "PostgreSQL wire protocol (drop-in)").
//
// Each client connection gets one server connection, made with the client's
// own user, database and credentials: fencegate relays the authentication
// exchange and holds no database password. The fence and token come with
// the connection (startup parameters fencegate.fence and fencegate.token,
// or the same in options); SET fencegate.token changes the token outside
// a transaction, and fencegate answers it and SHOW fencegate.* itself, in
// the extended protocol too (localSegment). Before the first client
// statement of every transaction, fencegate inserts the fence check
// (fencegate.advance_session) into the client's stream, in that same transaction,
// and drops its replies (PgBouncer's outstanding-request queue): a refused
// check fails the transaction. In the extended protocol it goes in front of
// the first message that may run code of the client's (runsClientCode): a
// Parse, as parse analysis converts literals with their types' input
// functions and a domain's CHECK may call any function; a Describe of a
// statement, which analyses it again once its plan is invalidated; a Bind
// or an Execute. Only statements that set a transaction up (BEGIN, SET
// TRANSACTION), which PostgreSQL takes only before its first query, run
// before it. The decision on the token is the pipeline's
// (proxy.Gateway.AdmitSQL), shared with gRPC and HTTP.
//
// The client gets a process id and cancel key of fencegate's
// (BackendKeyData), mapped to its server connection's: a CancelRequest
// with them cancels that connection's statement, and no other key reaches
// it. A notification the session's own server connection sent carries
// that process id too, so a client tells its own notifications apart as
// libpq documents (be_pid against PQbackendPID); SELECT pg_backend_pid()
// still answers the server's.
package pgwire

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/api/internal/listen"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/proxy/postgres/pgdsn"
	"github.com/fencegate/fencegate/tokens"
)

// Config configures a Server.
type Config struct {
	// PostgresDSN names the database server clients reach through
	// fencegate: its host, port and TLS settings (sslmode, sslrootcert,
	// ...). Its user, database and password are not used: clients log in
	// with their own.
	PostgresDSN string
	// TLS, when it returns a config, answers SSLRequest with 'S' and
	// serves TLS (with client certificates when it asks for them). Nil,
	// or a nil config, answers 'N'.
	TLS func() *tls.Config
	// Insecure lets a superuser, or a member of fencegate_owner, log in.
	Insecure bool
	// MaxFenceName is the longest fence name accepted; 0 means proxy's
	// default.
	MaxFenceName int
	// StartupTimeout bounds the startup and authentication of a
	// connection; 0 means 30 s.
	StartupTimeout time.Duration
	// MaxMessage bounds a message fencegate holds whole to read it (a
	// client's Query or Parse; a server's answer to fencegate's own
	// statements); 0 means 256 MiB. COPY data, rows and Bind messages
	// larger than the read buffer are passed on as they arrive, and only
	// the database bounds them.
	MaxMessage int
	// MaxConnections bounds the client connections served, as
	// pgbouncer's max_client_conn does; 0 means 10000. One more is
	// answered as PostgreSQL answers one over max_connections: its TLS
	// negotiation and startup message are read (a CancelRequest is still
	// honoured) and it gets FATAL 53300 "sorry, too many clients already".
	// Up to 64 such refusals run at once; past them a connection gets the
	// ErrorResponse at once, before anything is read (libpq then reports
	// "server sent an error response during SSL exchange").
	MaxConnections int
	// Logger receives connection errors; nil discards them.
	Logger *slog.Logger
	// EndedCheckInterval is how often the sessions with a transaction
	// open are checked for a term that ended under them, or a policy
	// that no longer allows their caller (see Server.Serve); 0 means
	// 100 ms.
	EndedCheckInterval time.Duration
	// Sessions binds each session's server connection to its fence
	// (fencegate.bind_session, from fencegate's own pool), so that its
	// fence check (fencegate.advance_session) checks that fence and no
	// other; a postgres.Backend. Required.
	Sessions Sessions
}

// Sessions binds the database sessions of the listener's clients to
// their fences; *postgres.Backend is one.
type Sessions interface {
	// BindSession binds the session of process pid, logged in as login,
	// to fence.
	BindSession(ctx context.Context, pid uint32, login, fence string) error
	// UnbindSession ends the binding of process pid's session.
	UnbindSession(ctx context.Context, pid uint32) error
	// EndSession terminates the backend of process pid, a session
	// BindSession bound, and ends its binding; it says whether it
	// terminated one.
	EndSession(ctx context.Context, pid uint32) (bool, error)
}

var _ Sessions = (*postgres.Backend)(nil)

// Server serves the PostgreSQL protocol in front of one database server.
type Server struct {
	gw      *proxy.Gateway
	cfg     Config
	target  target
	log     *slog.Logger
	stmts   verdicts
	cancels cancelKeys
	// peakQueued is the longest outstanding-request queue of an ended
	// session (tests).
	peakQueued atomic.Int64
	conns      listen.Group[*session]

	// testHookEnding, if set, runs in endTransaction between its decision
	// and closing the server connection.
	testHookEnding func()
	// testHookAnswering, if set, runs in S2C between taking a
	// ReadyForQuery off the queue and writing it to the client.
	testHookAnswering func()
	// testHookReply, if set, runs in S2C with qmu held as it matches a
	// server message of type t with the queue.
	testHookReply func(t byte)
	// testPrepareOnce, if set, prepares each session's check for its
	// first transaction only, as fencegate did before it prepared it for
	// each (tests: what a replaced check lets through).
	testPrepareOnce atomic.Bool

	sweepOnce sync.Once
	stopOnce  sync.Once
	stop      chan struct{}
	sweepDone chan struct{}
}

// target is where and how server connections are dialled.
type target struct {
	network, addr string
	tls           *tls.Config // nil: plain
	tlsOptional   bool        // sslmode=prefer: plain when the server says 'N'
	database      string      // --postgres-dsn's database, the only one served; "" for any
	timeout       time.Duration
}

// New returns a Server admitting transactions through gw.
func New(gw *proxy.Gateway, cfg Config) (*Server, error) {
	if gw == nil {
		return nil, errors.New("pgwire: no gateway")
	}
	if cfg.Sessions == nil {
		return nil, errors.New("pgwire: no Sessions to bind sessions to their fences")
	}
	pc, err := pgconn.ParseConfig(cfg.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("pgwire: --postgres-dsn: %w", pgdsn.ParseError(err))
	}
	t := target{network: "tcp", addr: net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))), tls: pc.TLSConfig, timeout: pc.ConnectTimeout, database: pc.Database}
	if len(pc.Host) > 0 && pc.Host[0] == '/' {
		t.network, t.addr = "unix", pc.Host+"/.s.PGSQL."+strconv.Itoa(int(pc.Port))
	}
	for _, fb := range pc.Fallbacks {
		if fb.Host == pc.Host && fb.Port == pc.Port && fb.TLSConfig == nil {
			t.tlsOptional = true
		}
	}
	if t.timeout == 0 {
		t.timeout = 10 * time.Second
	}
	if cfg.MaxFenceName == 0 {
		cfg.MaxFenceName = proxy.DefaultConfig().MaxFenceName
	}
	if cfg.StartupTimeout == 0 {
		cfg.StartupTimeout = 30 * time.Second
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = 10000
	}
	if cfg.MaxMessage == 0 {
		cfg.MaxMessage = maxMessage
	}
	switch {
	case cfg.EndedCheckInterval == 0:
		cfg.EndedCheckInterval = 100 * time.Millisecond
	case cfg.EndedCheckInterval < 0:
		return nil, fmt.Errorf("pgwire: EndedCheckInterval must not be negative, got %v", cfg.EndedCheckInterval)
	}
	if cfg.MaxConnections < 0 {
		return nil, fmt.Errorf("pgwire: MaxConnections must not be negative, got %d", cfg.MaxConnections)
	}
	if cfg.MaxMessage < maxAuthMessage {
		return nil, fmt.Errorf("pgwire: MaxMessage must be at least %d, got %d", maxAuthMessage, cfg.MaxMessage)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{
		gw: gw, cfg: cfg, target: t, log: log, cancels: cancelKeys{m: map[uint32]*cancelKey{}},
		stop: make(chan struct{}), sweepDone: make(chan struct{}),
	}, nil
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("pgwire: server closed")

// Serve accepts connections on lis until Shutdown or Close.
//
// While it serves, a transaction open under a term that has ended (this
// replica's memory says a later term began, or the election lost its
// leader) is ended within EndedCheckInterval: its fence check holds the
// fence's row, and the next leader's first write would wait for it for
// as long as the client keeps it open, a paused zombie forever. The
// server connection closes (a running statement is cancelled), so the
// server rolls the transaction back, and the client gets FATAL with the
// refusal's SQLSTATE (FG001 or FG002).
//
// Likewise a transaction whose caller the policy in force no longer
// allows sql.write on its fence (a reload added a deny rule, say) is ended
// within EndedCheckInterval of the reload, or at its client's next
// message if that comes first, with NOT_AUTHORIZED (42501): what it wrote
// is rolled back, as a new transaction of the caller's would be refused.
func (s *Server) Serve(lis net.Listener) error {
	s.sweepOnce.Do(func() { go s.sweep() })
	err := s.conns.Serve(lis,
		func(open int64) bool { return open <= int64(s.cfg.MaxConnections+refusing) },
		s.refuse,
		func(c net.Conn, open int64) { s.handle(c, open > int64(s.cfg.MaxConnections)) })
	if errors.Is(err, listen.ErrClosing) {
		return ErrServerClosed
	}
	return fmt.Errorf("pgwire: accept: %w", err)
}

// refusing is how many connections over MaxConnections are answered after
// their startup message at once (see MaxConnections).
const refusing = 64

// tooMany is PostgreSQL's answer to a connection over max_connections.
// libpq and pgx also read it in place of the answer to SSLRequest (the
// server's own reply when it cannot start a backend).
func tooMany() *fatal { return &fatal{code: "53300", msg: "sorry, too many clients already"} }

// refuse answers and closes a connection over MaxConnections+refusing,
// before reading anything from it.
func (s *Server) refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(tooMany().message())
	c.Close()
	s.log.Debug("pgwire: connection refused: too many clients", "peer", c.RemoteAddr().String(), "limit", s.cfg.MaxConnections)
}

// Connections returns the client connections open (those being refused
// included) and how many were refused at MaxConnections.
func (s *Server) Connections() (open int64, refused uint64) { return s.conns.Connections() }

// Shutdown stops accepting connections, closes idle sessions at once and
// every other one when its transaction ends, and waits for them until ctx
// is done; then it closes what is left (the server rolls those
// transactions back).
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.conns.Shutdown(ctx, func() { _ = s.Close() })
	s.stopSweep()
	return err
}

// Close closes the listeners and every session now.
func (s *Server) Close() error {
	s.conns.Close()
	s.stopSweep()
	return nil
}

// sweep ends, every EndedCheckInterval, the transactions whose term ended
// or whose caller the policy no longer allows (Serve), until stopSweep.
func (s *Server) sweep() {
	defer close(s.sweepDone)
	tick := time.NewTicker(s.cfg.EndedCheckInterval)
	defer tick.Stop()
	type ending struct {
		c   *session
		a   *proxy.Admission
		why *tokens.RefusalError
	}
	var ends []ending
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.conns.Each(func(c *session) {
			if a := c.open.Load(); a != nil {
				if why := a.Ended(); why != nil {
					ends = append(ends, ending{c, a, why})
				}
			}
		})
		for i, e := range ends {
			e.c.endTransaction(e.a, e.why)
			ends[i] = ending{}
		}
		ends = ends[:0]
	}
}

// stopSweep stops sweep and waits for it.
func (s *Server) stopSweep() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.sweepOnce.Do(func() { close(s.sweepDone) }) // never started
	<-s.sweepDone
}

// cancelKeys maps the key data fencegate gave each client to its server
// connection's real key, so a CancelRequest reaches the right server
// connection and a client cannot cancel another's with a key it saw.
type cancelKeys struct {
	mu sync.Mutex
	m  map[uint32]*cancelKey
}

type cancelKey struct {
	secret       []byte // what the client was given
	serverPID    uint32
	serverSecret []byte
}

// add registers a server key and returns the client's.
func (k *cancelKeys) add(serverPID uint32, serverSecret []byte) (uint32, []byte, error) {
	secret := make([]byte, max(4, len(serverSecret)))
	if _, err := rand.Read(secret); err != nil {
		return 0, nil, err
	}
	var b [4]byte
	k.mu.Lock()
	defer k.mu.Unlock()
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, nil, err
		}
		pid := binary.BigEndian.Uint32(b[:]) & 0x7fffffff // PIDs are positive
		if _, taken := k.m[pid]; !taken && pid != 0 {
			k.m[pid] = &cancelKey{secret: secret, serverPID: serverPID, serverSecret: append([]byte(nil), serverSecret...)}
			return pid, secret, nil
		}
	}
}

// get returns the key of the client's pid, nil if there is none.
func (k *cancelKeys) get(pid uint32) *cancelKey {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[pid]
}

func (k *cancelKeys) remove(pid uint32) {
	k.mu.Lock()
	delete(k.m, pid)
	k.mu.Unlock()
}

func (k *cancelKeys) lookup(pid uint32, secret []byte) (*cancelKey, bool) {
	k.mu.Lock()
	ck := k.m[pid]
	k.mu.Unlock()
	if ck == nil || len(ck.secret) != len(secret) || subtle.ConstantTimeCompare(ck.secret, secret) != 1 {
		return nil, false
	}
	return ck, true
}

// cancel sends the server the CancelRequest of ck.
func (s *Server) cancel(ck *cancelKey) {
	ctx, cancel := context.WithTimeout(context.Background(), s.target.timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, s.target.network, s.target.addr)
	if err != nil {
		s.log.Warn("pgwire: cancel: cannot reach the database", "err", err)
		return
	}
	defer c.Close()
	msg := make([]byte, 0, 12+len(ck.serverSecret))
	msg = binary.BigEndian.AppendUint32(msg, uint32(12+len(ck.serverSecret)))
	msg = binary.BigEndian.AppendUint32(msg, 80877102)
	msg = binary.BigEndian.AppendUint32(msg, ck.serverPID)
	msg = append(msg, ck.serverSecret...)
	_ = c.SetDeadline(time.Now().Add(s.target.timeout))
	if _, err := c.Write(msg); err != nil {
		s.log.Warn("pgwire: cancel", "err", err)
		return
	}
	var b [1]byte
	_, _ = c.Read(b[:]) // the server closes it when done
}

// TLSFrom adapts a listener's TLS config (api/auth.ServerTLS.Config, nil
// without TLS) to PostgreSQL: ALPN offers only "postgresql", as
// PostgreSQL 17 clients expect, not the HTTP protocols of the gRPC and
// HTTP listeners.
func TLSFrom(base *tls.Config) func() *tls.Config {
	if base == nil {
		return nil
	}
	return func() *tls.Config {
		c := base.Clone()
		c.NextProtos = []string{"postgresql"}
		if get := base.GetConfigForClient; get != nil {
			c.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
				cc, err := get(h)
				if cc != nil {
					cc = cc.Clone()
					cc.NextProtos = []string{"postgresql"}
				}
				return cc, err
			}
		}
		return c
	}
}
