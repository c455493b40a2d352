package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	pgthrow "github.com/fencegate/fencegate/proxy/postgres/throwaway"
)

// With --protocol=pgwire the workers are unmodified PostgreSQL clients:
// pgx connections through the replicas' PostgreSQL listeners
// (--pg-listen-addr), fence and token in the startup parameters, each
// record inserted in an explicit transaction. A connection keeps its token
// until the worker sees a new term of its own; a zombie goes on with its
// old connections and old token. In control mode the same connections go
// straight to PostgreSQL, with no fence.

// The values of --protocol.
const (
	protoGRPC     = "grpc"
	protoHTTP     = "http"
	protoGRPCHTTP = "grpc+http"
	protoPgwire   = "pgwire"
	protoRESP     = "resp"
)

// checkProtocol validates cfg.Protocol against the backend, names the
// alias mixed as grpc+http, and sets the HTTP share of grpc and http.
func checkProtocol(cfg *campaignConfig) error {
	switch cfg.Protocol {
	case "mixed":
		cfg.Protocol = protoGRPCHTTP
	case protoGRPC:
		cfg.HTTPP = 0
	case protoHTTP:
		cfg.HTTPP = 1
	case protoGRPCHTTP:
	case protoPgwire:
		if cfg.Backend != "postgres" {
			return fmt.Errorf("--protocol=pgwire needs --backend=postgres (Redis clients speak RESP)")
		}
	case protoRESP:
		if cfg.Backend != "redis" {
			return fmt.Errorf("--protocol=resp needs --backend=redis (PostgreSQL clients speak pgwire)")
		}
	default:
		return fmt.Errorf("--protocol %q: want grpc, http, grpc+http (or mixed), pgwire or resp", cfg.Protocol)
	}
	if cfg.HTTPP < 0 || cfg.HTTPP > 1 {
		return fmt.Errorf("--http %v: want a probability from 0 to 1", cfg.HTTPP)
	}
	return nil
}

// pgwireLogin is the pgwire workers' PostgreSQL login. On the drop-in path
// statements run with the client's own privileges (a policy's
// postgres_role is not applied), so it may only append to the ledger, as
// a deployment's worker login would: not a superuser, and with no
// fencegate role (fencegate_owner or fencegate_runtime), or the listener
// refuses it.
const pgwireLogin = "chaos_pgwire"

// createPgwireLogin creates the pgwire workers' login on pg and returns
// its DSN straight to the database. The throwaway server trusts local
// connections, so the password is carried as a client would but not
// checked.
func createPgwireLogin(ctx context.Context, conn *pgx.Conn, pg *pgthrow.Server) (string, error) {
	const password = "chaos-pgwire-password"
	r := pgx.Identifier{pgwireLogin}.Sanitize()
	for _, sql := range []string{
		"CREATE ROLE " + r + " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD " + sqlQuote(password),
		"GRANT INSERT ON ledger TO " + r,
		"GRANT USAGE ON SEQUENCE ledger_id_seq TO " + r,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return "", fmt.Errorf("pgwire login: %s: %w", sql, err)
		}
	}
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable", pgwireLogin, password, pg.Port()), nil
}

// pgwireConn is one of a worker's connections and the token it carries.
type pgwireConn struct {
	conn  *pgx.Conn
	token int64
}

// pgwireSender holds a worker's pgx connections: through the replicas'
// listeners round-robin (fenced), or straight to the database (control).
// A write takes an idle connection or opens one, so the worker's writing
// goroutines each have their own.
type pgwireSender struct {
	cfg    workerConfig
	base   *pgx.ConnConfig
	addrs  []string
	fenced bool
	next   atomic.Uint64

	mu   sync.Mutex
	idle []*pgwireConn
	rng  *rand.Rand
}

// newPgwireSender returns the worker's pgwire sender, presenting files
// over TLS when files.CA is set (the listener then serves TLS: the
// campaign's --secure).
func newPgwireSender(cfg workerConfig, files tlsFiles, fenced bool) (*pgwireSender, error) {
	if cfg.PgLoginDSN == "" {
		return nil, errors.New("worker: --pg-login-dsn is required with --protocol=pgwire")
	}
	base, err := pgx.ParseConfig(cfg.PgLoginDSN)
	if err != nil {
		return nil, fmt.Errorf("worker: --pg-login-dsn: %w", err)
	}
	base.Fallbacks = nil
	base.ConnectTimeout = cfg.Timeout
	addrs := []string{net.JoinHostPort(base.Host, strconv.Itoa(int(base.Port)))}
	if fenced {
		if len(cfg.PgGateways) == 0 {
			return nil, errors.New("worker: --pg-gateways is required with --protocol=pgwire in fenced mode")
		}
		addrs = cfg.PgGateways
		base.RuntimeParams["fencegate.fence"] = cfg.Fence
		if files.CA != "" {
			var tc *tls.Config
			if tc, err = files.config(); err != nil {
				return nil, fmt.Errorf("worker: TLS: %w", err)
			}
			base.TLSConfig = tc // verify-full: the campaign's CA, ServerName checked
		}
	}
	return &pgwireSender{cfg: cfg, base: base, addrs: addrs, fenced: fenced, rng: rand.New(rand.NewPCG(cfg.Seed, 0x9971))}, nil
}

// Close closes the idle connections.
func (s *pgwireSender) Close() {
	s.mu.Lock()
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, c := range idle {
		c.conn.Close(context.Background())
	}
}

// take returns an idle connection, or nil.
func (s *pgwireSender) take() *pgwireConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.idle); n > 0 {
		c := s.idle[n-1]
		s.idle = s.idle[:n-1]
		return c
	}
	return nil
}

// put gives back a connection that is still usable.
func (s *pgwireSender) put(c *pgwireConn) {
	if c.conn.IsClosed() || c.conn.PgConn().TxStatus() != 'I' {
		c.conn.Close(context.Background())
		return
	}
	s.mu.Lock()
	s.idle = append(s.idle, c)
	s.mu.Unlock()
}

// coin draws true with probability one half.
func (s *pgwireSender) coin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.IntN(2) == 0
}

// dial opens a connection with token, to the next address.
func (s *pgwireSender) dial(ctx context.Context, token int64) (*pgwireConn, error) {
	cfg := s.base.Copy()
	host, port, _ := net.SplitHostPort(s.addrs[(s.next.Add(1)-1)%uint64(len(s.addrs))])
	p, _ := strconv.ParseUint(port, 10, 16)
	cfg.Host, cfg.Port = host, uint16(p)
	if s.fenced {
		cfg.RuntimeParams["fencegate.token"] = strconv.FormatInt(token, 10)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &pgwireConn{conn: conn, token: token}, nil
}

// conn returns a connection carrying token: an idle one as it is, moved
// to the token by `SET fencegate.token` (a simple Query, or the extended
// protocol's unnamed statement as PgJDBC sends it) or by a new connection
// (drawn, so all are exercised), or a new one.
func (s *pgwireSender) conn(ctx context.Context, token int64) (*pgwireConn, error) {
	c := s.take()
	if c != nil && s.fenced && c.token != token {
		if s.coin() {
			set := "SET fencegate.token = " + strconv.FormatInt(token, 10)
			var err error
			if s.coin() {
				_, err = c.conn.Exec(ctx, set)
			} else {
				_, err = c.conn.PgConn().ExecParams(ctx, set, nil, nil, nil, nil).Close()
			}
			if err == nil {
				c.token = token
				return c, nil
			}
		}
		c.conn.Close(ctx)
		c = nil
	}
	if c != nil {
		return c, nil
	}
	return s.dial(ctx, token)
}

// send writes req with token and says what became of it. An ordinary
// write (one statement with parameters) runs in an explicit transaction,
// BEGIN, INSERT, COMMIT, so only a COMMIT can store it; anything else
// (the attacks) goes as one simple-protocol Query string, as written.
func (s *pgwireSender) send(ctx context.Context, token int64, req request) (Outcome, string) {
	c, err := s.conn(ctx, token)
	if err != nil {
		return pgwireOutcome(err, false)
	}
	var out Outcome
	var reason string
	if req.simple {
		out, reason = s.query(ctx, c.conn, req)
	} else {
		out, reason = s.transaction(ctx, c.conn, req)
	}
	s.put(c)
	return out, reason
}

// transaction runs req's statements in BEGIN ... COMMIT.
func (s *pgwireSender) transaction(ctx context.Context, conn *pgx.Conn, req request) (Outcome, string) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return pgwireOutcome(err, false)
	}
	for _, st := range req.stmts {
		if _, err := tx.Exec(ctx, st.sql, st.params...); err != nil {
			// No COMMIT was sent, and none will be: the server rolls
			// back, on a broken connection too.
			_ = tx.Rollback(ctx)
			return pgwireOutcome(err, false)
		}
	}
	return pgwireOutcome(tx.Commit(ctx), true)
}

// query sends req's statements, parameters inlined, as one Query message:
// one implicit transaction, unless a statement in it says otherwise.
func (s *pgwireSender) query(ctx context.Context, conn *pgx.Conn, req request) (Outcome, string) {
	sqls := make([]string, len(req.stmts))
	for i, st := range req.stmts {
		sqls[i] = inlineParams(st)
	}
	return pgwireOutcome(conn.PgConn().Exec(ctx, strings.Join(sqls, ";\n")).Close(), true)
}

// pgwireOutcome classifies the error of a step of a write; committing says
// the step could commit it (COMMIT, or a Query string). Before that, any
// error means nothing was stored. After it, only a server error that
// ended the statement says nothing was stored; anything else (a lost
// connection, a timeout, a FATAL) leaves the outcome unknown. pgconn's
// SafeToRetry is no proof that nothing was sent: a read that fails after
// the COMMIT went out closes the connection, and the reader's next call
// then reports "conn closed" as safe to retry (seen in this campaign: a
// refused write stored, when a replica was killed).
func pgwireOutcome(err error, committing bool) (Outcome, string) {
	var pe *pgconn.PgError
	switch {
	case err == nil:
		// pgx checked the server answered COMMIT, not ROLLBACK.
		return Acked, ""
	case !committing:
		r := pgwireReason(err)
		if r == reasonLost || r == reasonTimeout {
			r += " before COMMIT"
		}
		return Refused, r
	case errors.Is(err, pgx.ErrTxCommitRollback):
		return Refused, "ROLLED_BACK"
	case errors.As(err, &pe) && (!lostSession(pe) || endedRolledBack(pe)):
		return Refused, pgwireReason(err)
	}
	return Unknown, pgwireReason(err) + " (outcome unknown)"
}

// inlineParams writes st's parameters into its SQL as literals, for the
// simple protocol.
func inlineParams(st stmt) string {
	sql := st.sql
	for i := len(st.params); i >= 1; i-- { // $10 before $1
		var lit string
		switch p := st.params[i-1].(type) {
		case int64:
			lit = strconv.FormatInt(p, 10)
		default:
			lit = sqlQuote(fmt.Sprint(p))
		}
		sql = strings.ReplaceAll(sql, "$"+strconv.Itoa(i), lit)
	}
	return sql
}

// endedRolledBack reports whether pe is fencegate's word that it ended
// the transaction, open when its term ended, before anything more of it
// reached the database: rolled back, so the write counts as refused, and
// the checker holds fencegate to it (a refused write found stored is a
// violation).
func endedRolledBack(pe *pgconn.PgError) bool {
	return pe.Severity == "FATAL" && (pe.Code == "FG001" || pe.Code == "FG002") &&
		strings.Contains(pe.Message, "; its open transaction is rolled back")
}

// lostSession reports whether a server error ended the session rather
// than the statement (FATAL, a shutdown, a broken connection): what was
// sent before it may have been applied.
func lostSession(pe *pgconn.PgError) bool {
	if pe.Severity == "FATAL" || pe.Severity == "PANIC" {
		return true
	}
	if len(pe.Code) < 2 {
		return false
	}
	switch pe.Code[:2] {
	case "08", "57", "58", "XX":
		return true
	}
	return false
}

// Reasons of a write's failure that are not the server's answer.
const (
	reasonLost    = "CONNECTION_LOST"
	reasonTimeout = "TIMEOUT"
)

// pgwireReason names the refusal err: fencegate's reason for its own
// errors ("fencegate: <REASON>: ..."), STATEMENT_FAILED for the
// database's refusal of a statement (which an ordinary write never
// deserves: CheckHostile's collateral refusals), TLS_REFUSED for a
// refused handshake, else a short description.
func pgwireReason(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if r, ok := strings.CutPrefix(pe.Message, "fencegate: "); ok {
			if i := strings.Index(r, ": "); i > 0 {
				return r[:i]
			}
		}
		if lostSession(pe) || pe.Code == "57014" {
			return "SQLSTATE " + pe.Code // a fault, or the client's own timeout
		}
		return "STATEMENT_FAILED"
	}
	if tlsRefused(err.Error()) {
		return reasonTLSRefused
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return reasonTimeout
	}
	return reasonLost
}
