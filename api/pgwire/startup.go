package pgwire

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/tokens"
)

// Startup packet codes (PostgreSQL's protocol).
const (
	codeSSL    = 80877103
	codeGSS    = 80877104
	codeCancel = 80877102
)

// checkSQL is fencegate's fence check, prepared on every server
// connection: advance (or advance_term) of the fence fencegate bound the
// session to, and of no other. Types are schema-qualified: no
// search_path of the client's changes what it calls.
const checkSQL = "SELECT fencegate.advance_session($1::pg_catalog.text, $2::pg_catalog.int8)"

// roleCheckSQL says what the login may do to the fences beyond its own
// session's check, over every role it may become (pg_has_role MEMBER: with
// or without INHERIT, SET ROLE reaches it):
//   - 'owner': a superuser; CREATEROLE (on PostgreSQL 15 it may grant
//     itself any role, fencegate_owner too); fencegate_owner; or a
//     predefined role that writes the server's files or runs its programs;
//   - 'runtime': a role that may run fencegate's own functions for any
//     fence (advance, advance_term, reset, bind_session:
//     fencegate_runtime's), write a table of schema fencegate (directly,
//     or as pg_write_all_data), or create objects in it;
//   - empty: neither.
//
// It runs in the client's session, with the client's settings: every
// operator is pg_catalog's by name, as a search_path the login set (in
// its startup options, or ALTER ROLE) could put an = of its own first.
const roleCheckSQL = "SELECT CASE WHEN pg_catalog.bool_or(r.rolsuper OR r.rolcreaterole OR r.rolname OPERATOR(pg_catalog.=) ANY " +
	"('{fencegate_owner,pg_write_server_files,pg_execute_server_program}'::pg_catalog.name[])) THEN 'owner' " +
	"WHEN pg_catalog.bool_or(" +
	"pg_catalog.has_function_privilege(r.oid, 'fencegate.advance(pg_catalog.text, pg_catalog.int8)', 'EXECUTE') OR " +
	"pg_catalog.has_function_privilege(r.oid, 'fencegate.advance_term(pg_catalog.text, pg_catalog.int8, pg_catalog.text, pg_catalog.text)', 'EXECUTE') OR " +
	"pg_catalog.has_function_privilege(r.oid, 'fencegate.reset(pg_catalog.text, pg_catalog.int8)', 'EXECUTE') OR " +
	"pg_catalog.has_function_privilege(r.oid, 'fencegate.bind_session(pg_catalog.int4, pg_catalog.name, pg_catalog.text, pg_catalog.text, pg_catalog.text)', 'EXECUTE') OR " +
	"pg_catalog.has_schema_privilege(r.oid, 'fencegate', 'CREATE') OR " +
	"EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.relnamespace OPERATOR(pg_catalog.=) 'fencegate'::pg_catalog.regnamespace " +
	"AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p}'::pg_catalog.\"char\"[]) AND pg_catalog.has_table_privilege(r.oid, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE'))" +
	") THEN 'runtime' ELSE '' END " +
	"FROM pg_catalog.pg_roles r WHERE pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')"

// fatal is a connection refused at its start.
type fatal struct{ code, msg string }

func (f *fatal) Error() string { return f.msg }

// message is the FATAL ErrorResponse the client gets.
func (f *fatal) message() []byte {
	return appendError(nil, pgError{Severity: "FATAL", Code: f.code, Message: f.msg})
}

func refuseStart(code string, r tokens.Reason, format string, args ...any) *fatal {
	return &fatal{code: code, msg: "fencegate: " + string(r) + ": " + fmt.Sprintf(format, args...)}
}

// handle serves one client connection; one that would be over
// MaxConnections (full) is refused after its startup message.
func (s *Server) handle(c net.Conn, full bool) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(s.cfg.StartupTimeout))
	sess, client, err := s.startup(c, full)
	if err != nil {
		var f *fatal
		if errors.As(err, &f) {
			// The startup deadline may have passed, waiting for the
			// database: a moment more to say why.
			_ = client.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = client.Write(f.message())
		}
		if sess != nil {
			sess.close()
			sess.done(err)
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, errCancel) {
			s.log.Debug("pgwire: connection refused at start", "peer", c.RemoteAddr().String(), "err", err)
		}
		return
	}
	if !s.conns.Track(sess, true) {
		// Logged in as the server began shutting down: told so, as
		// PostgreSQL tells a client whose session it ends.
		sess.shutdown.Store(true)
		sess.close()
		sess.done(ErrServerClosed)
		return
	}
	defer s.conns.Track(sess, false)
	if !sess.certUntil.IsZero() {
		// The identity is fixed at login: it lasts as long as the
		// certificate that proved it.
		t := time.AfterFunc(time.Until(sess.certUntil), sess.certExpired)
		defer t.Stop()
	}
	_ = sess.client.SetDeadline(time.Time{})
	_ = sess.server.SetDeadline(time.Time{})
	sess.run()
}

var errCancel = errors.New("pgwire: cancel request")

// readStartup reads one startup packet straight from c, unbuffered, so no
// byte sent before a TLS handshake is read as if it came after.
func readStartup(c net.Conn) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n < 8 || n > 10000 {
		return nil, fmt.Errorf("pgwire: startup packet of invalid length %d", n)
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(c, body); err != nil {
		return nil, unexpectedEOF(err)
	}
	return body, nil
}

// startup negotiates TLS, reads the startup message, connects to the
// server with the client's own credentials and relays authentication.
// A *fatal error is sent to the client as a FATAL ErrorResponse; when
// the session is returned with an error, on its (possibly TLS) connection.
func (s *Server) startup(c net.Conn, full bool) (*session, net.Conn, error) {
	client := c
	var tlsState *tls.ConnectionState
	var sm pgproto3.StartupMessage
	for {
		body, err := readStartup(client)
		if err != nil {
			return nil, client, err
		}
		switch code := binary.BigEndian.Uint32(body); code {
		case codeSSL:
			var cfg *tls.Config
			if s.cfg.TLS != nil && c.LocalAddr().Network() != "unix" {
				// PostgreSQL too answers 'N' on its Unix socket.
				cfg = s.cfg.TLS()
			}
			if cfg == nil || tlsState != nil {
				if _, err := client.Write([]byte{'N'}); err != nil {
					return nil, client, err
				}
				continue
			}
			if _, err := client.Write([]byte{'S'}); err != nil {
				return nil, client, err
			}
			tc := tls.Server(client, cfg)
			if err := tc.Handshake(); err != nil {
				return nil, client, fmt.Errorf("pgwire: TLS: %w", err)
			}
			st := tc.ConnectionState()
			tlsState, client = &st, tc
		case codeGSS:
			if _, err := client.Write([]byte{'N'}); err != nil {
				return nil, client, err
			}
		case codeCancel:
			if len(body) < 12 {
				return nil, client, errCancel
			}
			if ck, ok := s.cancels.lookup(binary.BigEndian.Uint32(body[4:8]), body[8:]); ok {
				s.cancel(ck)
			}
			return nil, client, errCancel
		case pgproto3.ProtocolVersion30, pgproto3.ProtocolVersion32:
			if full {
				s.conns.CountRefusal()
				return nil, client, tooMany()
			}
			if err := sm.Decode(body); err != nil {
				return nil, client, &fatal{code: "08P01", msg: "fencegate: invalid startup message: " + err.Error()}
			}
			sess, err := s.login(c, client, tlsState, &sm)
			return sess, client, err
		default:
			return nil, client, &fatal{code: "0A000", msg: fmt.Sprintf("fencegate: unsupported frontend protocol %d.%d", code>>16, code&0xffff)}
		}
	}
}

// login takes fence and token from the startup parameters, dials the
// server and relays authentication. raw is the TCP connection, client
// the one to talk on (TLS or not).
func (s *Server) login(raw, client net.Conn, tlsState *tls.ConnectionState, sm *pgproto3.StartupMessage) (*session, error) {
	fail := func(f *fatal) (*session, error) { return nil, f }
	params := make(map[string]string, len(sm.Parameters))
	fence, token, other := "", "", ""
	for k, v := range sm.Parameters {
		switch lk := strings.ToLower(k); {
		case lk == "fencegate.fence":
			fence = v
		case lk == "fencegate.token":
			token = v
		case strings.HasPrefix(lk, "fencegate."):
			other = k
		default:
			params[k] = v
		}
	}
	if opts, ok := params["options"]; ok {
		rest, f, t, o := splitOptions(opts)
		if f != "" {
			fence = f
		}
		if t != "" {
			token = t
		}
		if o != "" {
			other = o
		}
		if rest == "" {
			delete(params, "options")
		} else {
			params["options"] = rest
		}
	}
	if other != "" {
		return fail(refuseStart("FG006", tokens.ReasonInvalidRequest, "unknown setting %.64q: only fencegate.fence and fencegate.token may be given", other))
	}
	if r, ok := params["replication"]; ok {
		switch strings.ToLower(r) {
		case "false", "off", "no", "0":
		default:
			return fail(refuseStart("FG006", tokens.ReasonInvalidRequest, "replication connections are not fenced; connect to the database directly"))
		}
	}
	user := params["user"]
	if user == "" {
		return fail(&fatal{code: "28000", msg: "fencegate: no PostgreSQL user name specified in startup packet"})
	}
	if db := cmp.Or(params["database"], user); s.target.database != "" && db != s.target.database {
		// Its sessions could not be bound: fencegate binds them, and
		// keeps the fences, in --postgres-dsn's database.
		return fail(refuseStart("FG006", tokens.ReasonInvalidRequest, "database %.64q: this listener serves database %q (--postgres-dsn's), where fencegate keeps the fences", db, s.target.database))
	}
	// PostgreSQL cuts a user name to 63 bytes (NAMEDATALEN - 1) and logs
	// the client in as that role: the principal postgres:<user> is the
	// role logged in, not what the client sent, or a deny rule naming the
	// role would not match a longer name (afterLogin checks it against
	// the session_authorization the server reports).
	if len(user) > maxNameLen {
		user = user[:maxNameLen]
	}
	// A fence or token of the wrong form is a refused write, recorded as
	// one (Gateway.RefusedLogin), with the principal of a client
	// certificate if there is one: the database login was never tried.
	refused := func(code string, r tokens.Reason, format string, args ...any) (*session, error) {
		rr := tokens.Refuse(r, fence, 0, format, args...)
		s.gw.RefusedLogin(callerContext(certPrincipal(tlsState), raw), policy.ActionSQLWrite, fence, token, rr)
		return fail(&fatal{code: code, msg: rr.Error()})
	}
	if !proxy.ValidFenceName(fence, s.cfg.MaxFenceName) {
		if fence == "" {
			return refused("FG006", tokens.ReasonInvalidRequest, "no fence: connect with options '-c fencegate.fence=<fence> -c fencegate.token=<token>' (PGOPTIONS)")
		}
		return refused("FG006", tokens.ReasonInvalidRequest, "fence name %.64q: want 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", fence, s.cfg.MaxFenceName)
	}
	if _, err := tokens.Parse(token); err != nil {
		if errors.Is(err, tokens.ErrMissing) {
			return refused("FG004", tokens.ReasonMissingToken, "no fencing token: connect with options '-c fencegate.token=<token>' (PGOPTIONS)")
		}
		return refused("FG004", tokens.ReasonInvalidToken, "fencing token %.32q is not a decimal integer in [1, 2^64)", token)
	}

	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StartupTimeout)
	defer cancel()
	server, err := s.dial(ctx)
	if err != nil {
		return fail(&fatal{code: "08006", msg: "fencegate: BACKEND_UNAVAILABLE: cannot reach the database: " + err.Error()})
	}
	startBy := time.Now().Add(s.cfg.StartupTimeout)
	_ = server.SetDeadline(startBy)
	sess := newSession(s, client, server)
	sess.fence, sess.token, sess.user, sess.startBy = fence, token, user, startBy
	out, err := (&pgproto3.StartupMessage{ProtocolVersion: sm.ProtocolVersion, Parameters: params}).Encode(nil)
	if err == nil {
		_, err = server.Write(out)
	}
	if err != nil {
		server.Close()
		return fail(&fatal{code: "08006", msg: "fencegate: BACKEND_UNAVAILABLE: " + err.Error()})
	}
	if err := sess.relayAuth(); err != nil {
		return sess, err
	}
	principal := cmp.Or(certPrincipal(tlsState), "postgres:"+user)
	if tlsState != nil && len(tlsState.VerifiedChains) > 0 && len(tlsState.VerifiedChains[0]) > 0 {
		sess.certUntil = auth.ChainNotAfter(tlsState.VerifiedChains)
		sess.chains = tlsState.VerifiedChains
	}
	sess.ctx = callerContext(principal, raw)
	return sess, nil
}

// certPrincipal is the principal of the connection's verified client
// certificate, "" without one.
func certPrincipal(st *tls.ConnectionState) string {
	if st == nil || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return ""
	}
	return auth.PrincipalOf(st.VerifiedChains[0][0])
}

// callerContext is the context of a listener session's writes: its
// caller, principal at the peer of raw, over pgwire.
func callerContext(principal string, raw net.Conn) context.Context {
	return proxy.WithProtocol(policy.NewContext(context.Background(), &policy.Caller{Principal: principal, Peer: raw.RemoteAddr()}), proxy.ProtocolPgwire)
}

// maxNameLen is the longest name PostgreSQL keeps (NAMEDATALEN - 1).
const maxNameLen = 63

// splitOptions takes fencegate's settings out of a startup options string
// (`-c name=value`, `-cname=value` or `--name=value`, white space
// separated, backslash escaping), returning the rest as given.
func splitOptions(s string) (rest, fence, token, other string) {
	type tok struct{ raw, val string }
	var toks []tok
	for i := 0; i < len(s); {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) {
			break
		}
		start := i
		var val []byte
		for i < len(s) && !isSpace(s[i]) {
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			val = append(val, s[i])
			i++
		}
		toks = append(toks, tok{s[start:i], string(val)})
	}
	var kept []string
	for j := 0; j < len(toks); j++ {
		v, n, setting := toks[j].val, 1, ""
		switch {
		case v == "-c" && j+1 < len(toks):
			setting, n = toks[j+1].val, 2
		case strings.HasPrefix(v, "-c"):
			setting = v[2:]
		case strings.HasPrefix(v, "--"):
			setting = v[2:]
		}
		name, value, _ := strings.Cut(setting, "=")
		lname := strings.ToLower(strings.ReplaceAll(name, "-", "_"))
		if strings.HasPrefix(lname, "fencegate.") {
			switch lname {
			case "fencegate.fence":
				fence = value
			case "fencegate.token":
				token = value
			default:
				other = name
			}
			j += n - 1
			continue
		}
		for k := j; k < j+n; k++ {
			kept = append(kept, toks[k].raw)
		}
		j += n - 1
	}
	return strings.Join(kept, " "), fence, token, other
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// dial connects to the database server, with TLS when the DSN asks for it.
func (s *Server) dial(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: s.target.timeout}
	c, err := d.DialContext(ctx, s.target.network, s.target.addr)
	if err != nil {
		return nil, err
	}
	if s.target.tls == nil {
		return c, nil
	}
	_ = c.SetDeadline(time.Now().Add(s.target.timeout))
	if _, err := c.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
		c.Close()
		return nil, err
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		return nil, err
	}
	switch {
	case b[0] == 'S':
		tc := tls.Client(c, s.target.tls.Clone())
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("TLS: %w", err)
		}
		return tc, nil
	case b[0] == 'N' && s.target.tlsOptional:
		return c, nil
	}
	c.Close()
	return nil, errors.New("the server does not offer TLS, which --postgres-dsn requires")
}

// relayAuth relays the authentication exchange until the server accepts
// the login, then reads the session's start (ParameterStatus,
// BackendKeyData, ReadyForQuery), refuses superusers and owners of
// fencegate's schema, and prepares the fence check.
func (c *session) relayAuth() error {
	for {
		t, body, raw, err := c.sr.next()
		if err != nil {
			return c.startLost(err)
		}
		switch t {
		case 'R':
			if len(body) < 4 {
				return errors.New("pgwire: short authentication message")
			}
			code := binary.BigEndian.Uint32(body)
			switch code {
			case 0: // AuthenticationOk
				c.cw.Write(raw)
				c.cr.limit = c.s.cfg.MaxMessage
				return c.afterLogin()
			case 10: // SASL: no -PLUS, the TLS of each side is its own
				c.out = c.out[:0]
				c.out, _ = beginMsgAt(c.out, 'R')
				c.out = binary.BigEndian.AppendUint32(c.out, 10)
				mechs, n := body[4:], 0
				for len(mechs) > 0 && mechs[0] != 0 {
					m, rest, ok := cstring(mechs)
					if !ok {
						return errors.New("pgwire: bad SASL mechanisms")
					}
					if string(m) != "SCRAM-SHA-256-PLUS" {
						c.out = append(append(c.out, m...), 0)
						n++
					}
					mechs = rest
				}
				if n == 0 {
					return &fatal{code: "28000", msg: "fencegate: the database offers only SCRAM-SHA-256-PLUS, which cannot bind a connection that fencegate splits"}
				}
				c.out = finishMsg(append(c.out, 0), 0)
				c.cw.Write(c.out)
			case 3, 5, 11, 12: // cleartext, MD5, SASL continue, SASL final
				c.cw.Write(raw)
			default:
				return &fatal{code: "28000", msg: fmt.Sprintf("fencegate: authentication method %d (GSSAPI, SSPI, ...) is not supported through fencegate", code)}
			}
			if err := c.cw.Flush(); err != nil {
				return err
			}
			if code == 12 {
				continue // no answer to SASL final
			}
			ct, _, craw, err := c.cr.next()
			if err != nil {
				return err
			}
			if ct != 'p' {
				return &fatal{code: "08P01", msg: fmt.Sprintf("fencegate: expected a password message, got %q", ct)}
			}
			if code == 10 && c.bindingRefused(craw) {
				return &fatal{code: "28000", msg: "fencegate: SCRAM channel binding cannot pass through fencegate, which ends the client's TLS and opens its own to the database, " +
					"and a database reached over TLS refuses a client that could bind but was not offered it: connect with channel_binding=disable"}
			}
			if _, err := c.sw.Write(craw); err != nil {
				return c.startLost(err)
			}
			if err := c.sw.Flush(); err != nil {
				return c.startLost(err)
			}
		case 'E', 'N', 'v':
			c.cw.Write(raw)
			if t == 'E' {
				_ = c.cw.Flush()
				return io.EOF // the server refused the login and closes
			}
		default:
			return &fatal{code: "08P01", msg: fmt.Sprintf("fencegate: unexpected message %q from the database during authentication", t)}
		}
	}
}

// bindingRefused says the database will refuse the client's SCRAM start
// (raw, a SASLInitialResponse): its GS2 header says "y" (the client
// supports channel binding and thinks the server does not, as fencegate
// offers no -PLUS), and the database, reached over TLS, does support it:
// SCRAM's guard against a downgrade, which a client's signed proof keeps
// fencegate from changing.
func (c *session) bindingRefused(raw []byte) bool {
	if _, tlsServer := c.server.(*tls.Conn); !tlsServer || len(raw) < 5 {
		return false
	}
	_, rest, ok := cstring(raw[5:]) // the mechanism
	if !ok || len(rest) < 5 {
		return false
	}
	return rest[4] == 'y' // after the data's int32 length
}

// startLost is the FATAL a client gets when the database stops answering
// its connection's start (the startup timeout) or ends it: what a client
// of PostgreSQL itself would see as a connection failure, with the reason.
func (c *session) startLost(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &fatal{code: "08006", msg: fmt.Sprintf("fencegate: BACKEND_UNAVAILABLE: the database did not answer the connection's start within %v", c.s.cfg.StartupTimeout)}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &fatal{code: "08006", msg: "fencegate: BACKEND_UNAVAILABLE: the database closed the connection during its start"}
	}
	return &fatal{code: "08006", msg: "fencegate: BACKEND_UNAVAILABLE: lost the database during the connection's start: " + err.Error()}
}

func beginMsgAt(dst []byte, typ byte) ([]byte, int) { return beginMsg(dst, typ) }

func (c *session) afterLogin() error {
	superuser := false
	for {
		t, body, raw, err := c.sr.next()
		if err != nil {
			return c.startLost(err)
		}
		switch t {
		case 'S':
			name, rest, _ := cstring(body)
			val, _, _ := cstring(rest)
			if string(name) == "is_superuser" && string(val) == "on" {
				superuser = true
			}
			if string(name) == "session_authorization" && string(val) != c.user {
				return refuseStart("FG006", tokens.ReasonInvalidRequest, "the database logged the client in as %q, not as the user %q it named: fencegate cannot tell its principal", val, c.user)
			}
			c.lexical.report(body)
			c.cw.Write(raw)
		case 'K':
			if len(body) < 8 {
				return errors.New("pgwire: short BackendKeyData")
			}
			pid, secret, err := c.s.cancels.add(binary.BigEndian.Uint32(body), body[4:])
			if err != nil {
				return err
			}
			c.cancelPID, c.serverPID = pid, binary.BigEndian.Uint32(body)
			kd, _ := (&pgproto3.BackendKeyData{ProcessID: pid, SecretKey: secret}).Encode(nil)
			c.cw.Write(kd)
		case 'N':
			c.cw.Write(raw)
		case 'E':
			c.cw.Write(raw)
			_ = c.cw.Flush()
			return io.EOF
		case 'Z':
			status := body[0]
			if superuser && !c.s.cfg.Insecure {
				return refuseStart("FG006", tokens.ReasonInvalidRequest, "role %q is a superuser, whose statements could change the fences: log in as a role that is not (or start fencegate with --insecure)", c.user)
			}
			if err := c.prepare(); err != nil {
				return err
			}
			c.status = status
			c.cw.Write(appendReadyForQuery(c.out[:0], status))
			return c.cw.Flush()
		default:
			return &fatal{code: "08P01", msg: fmt.Sprintf("fencegate: unexpected message %q from the database after login", t)}
		}
	}
}

// prepare tries the fence check (prepares it unnamed) and checks
// the login's roles, in one round trip whose replies the client never
// sees, and meanwhile binds the session to its fence from fencegate's own
// pool: until it is bound, its check refuses every transaction.
func (c *session) prepare() error {
	b := appendParse(c.out[:0], "", checkSQL) // can it be prepared? (check prepares it for each transaction)
	b = appendParse(b, "", roleCheckSQL)
	b, sp := beginMsg(b, 'B')
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0) // unnamed portal and statement, no formats, no params, no result formats
	b = finishMsg(b, sp)
	b = appendExecuteUnnamed(b)
	b = appendSync(b)
	c.out = b
	if _, err := c.sw.Write(b); err != nil {
		return c.startLost(err)
	}
	if err := c.sw.Flush(); err != nil {
		return c.startLost(err)
	}
	// Within the connection's start, whose deadline the server
	// connection has too: a bind that waits for fencegate's pool past it
	// is what the client is told of, not the server's answers, which are
	// read after it.
	ctx, cancel := context.WithDeadline(context.Background(), c.startBy)
	c.bound = true // unbound when the session ends, whatever this returns
	bindErr := c.s.cfg.Sessions.BindSession(ctx, c.serverPID, c.user, c.fence)
	cancel()
	if bindErr != nil {
		return &fatal{code: "08006", msg: "fencegate: BACKEND_UNAVAILABLE: cannot bind the session to its fence: " + bindErr.Error()}
	}
	var reach, failure string
	for {
		t, body, _, err := c.sr.next()
		if err != nil {
			return c.startLost(err)
		}
		switch t {
		case 'D':
			// One column: int16 count, int32 length, value.
			if len(body) >= 6 {
				if n := int32(binary.BigEndian.Uint32(body[2:6])); n > 0 && int(n) <= len(body)-6 {
					reach = string(body[6 : 6+n])
				}
			}
		case 'E':
			if failure == "" {
				failure, _ = errorField(body, 'M')
			}
		case 'Z':
			if failure != "" {
				return &fatal{code: "FG005", msg: "fencegate: BACKEND_UNAVAILABLE: cannot prepare the fence check (" + failure +
					"): run fencegate migrate"}
			}
			switch {
			case c.s.cfg.Insecure:
			case reach == "owner":
				return refuseStart("FG006", tokens.ReasonInvalidRequest, "role %q is a superuser, has CREATEROLE, or may become fencegate_owner or a role that writes the server's files or runs its programs, whose statements could change the fences: log in as a role that is none of these (or start fencegate with --insecure)", c.user)
			case reach == "runtime":
				return refuseStart("FG006", tokens.ReasonInvalidRequest, "role %q may run fencegate's own functions or write its tables (as fencegate_runtime's members, such as fencegate's --postgres-dsn login, or pg_write_all_data's may), whose statements could move any fence's mark: log in as a role that may not (or start fencegate with --insecure)", c.user)
			}
			return nil
		}
	}
}

// unbind ends the session's binding to its fence, once its server
// connection is closed. busy says the server had not answered every
// message: a statement may still run there, one that trapped the cancel
// endTransaction sent and goes on holding its transaction's locks (the
// fence's row) although its connection is closed, so its backend is
// terminated with the binding.
func (c *session) unbind(busy bool) {
	if !c.bound {
		return
	}
	c.bound = false
	ctx, cancel := context.WithTimeout(context.Background(), unbindTimeout)
	defer cancel()
	if busy {
		ended, err := c.s.cfg.Sessions.EndSession(ctx, c.serverPID)
		if err != nil {
			c.s.log.Warn("pgwire: cannot terminate the backend of a session that ended mid-statement (it runs until its statement returns)", "pid", c.serverPID, "fence", c.fence, "err", err)
		} else if ended {
			c.s.log.Info("pgwire: terminated the backend of a session that ended mid-statement", "pid", c.serverPID, "fence", c.fence, "user", c.user)
		}
		return
	}
	if err := c.s.cfg.Sessions.UnbindSession(ctx, c.serverPID); err != nil {
		c.s.log.Debug("pgwire: cannot unbind a session (the next bind drops it)", "pid", c.serverPID, "err", err)
	}
}

// unbindTimeout bounds unbinding a session that ended.
const unbindTimeout = 2 * time.Second

// checkName is the name the fence check is prepared under for each
// transaction (check).
const checkName = "fencegate_check"

// newSession sets up the buffers of a client and server connection pair.
func newSession(s *Server, client, server net.Conn) *session {
	c := &session{
		s: s, client: client, server: server, toServer: &gate{Conn: server},
		cr: newMsgReader(client), sr: newMsgReader(server),
		cw:  bufio.NewWriterSize(client, bufSize),
		out: make([]byte, 0, 256), segStart: true,
		stmts: map[string]*verdict{}, portals: map[string]*verdict{},
		segStmts: map[string]int32{}, segPortals: map[string]int32{},
		checkOnce: s.testPrepareOnce.Load(),
	}
	c.sw = bufio.NewWriterSize(c.toServer, bufSize)
	c.qcond.L = &c.qmu
	// Until the database has logged the client in, its messages are
	// passwords and SASL responses.
	c.cr.limit, c.sr.limit = maxAuthMessage, s.cfg.MaxMessage
	return c
}
