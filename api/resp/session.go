package resp

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/api/internal/listen"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/tokens"
)

// session is one client connection. One goroutine reads a command, or
// every command the client has pipelined, runs them, and writes the
// replies; it flushes when nothing more is buffered to answer. While a
// write of replies waits for the client, another reads the connection
// (readAhead).
type session struct {
	srv  *Server
	conn net.Conn
	raw  net.Conn // conn's own connection, under TLS
	in   *readAhead
	r    *reader
	w    *writer
	ctx  context.Context // carries the caller; ends with the server
	id   int64

	fence, token string // from AUTH; token raw, as the client sent it
	authed       bool
	name         string
	// authBy is when a connection without AUTH is closed (AuthTimeout);
	// readBy says a read deadline is set for it.
	authBy time.Time
	readBy bool
	// certUntil is when the client certificate that named the caller
	// expires, and chains its verified chains (certExpired); zero and nil
	// without one.
	certUntil time.Time
	chains    [][]*x509.Certificate

	multi       bool
	dirty       bool // a command was refused while queueing: EXEC aborts
	queued      [][]string
	queuedBytes int // of queued's arguments, at most MaxCommandBytes
	// overLimit: the MULTI went over a limit a write over HTTP would be
	// refused for; its EXEC is counted and audited as that refusal.
	overLimit *tokens.RefusalError

	// Reused between batches: nothing below keeps them after a write.
	batch [][]string
	out   []any

	deadlineSet time.Time // when the write deadline was last moved

	mu     sync.Mutex
	idle   bool // blocked reading with every reply flushed
	closed bool // CloseIfIdle closed it
}

func newSession(ctx context.Context, s *Server, c net.Conn) *session {
	lim := limits{maxArgs: s.cfg.MaxArgs, maxBulk: s.cfg.MaxBulkBytes, maxCommand: s.cfg.MaxCommandBytes, maxInline: s.cfg.MaxInlineBytes}
	in := newReadAhead(c, aheadSize)
	return &session{
		srv: s, conn: c, raw: c, in: in, r: newReader(in, lim), w: newWriter(in.writer(c)), ctx: ctx, id: s.ids.Add(1),
		authBy: time.Now().Add(s.cfg.AuthTimeout),
	}
}

// errQuit ends a session the client asked to end.
var errQuit = errors.New("resp: client quit")

// errCrossProtocol ends a session that sent an HTTP request.
var errCrossProtocol = errors.New("resp: HTTP request on the RESP listener")

// crossProtocol says whether a command's name is the start of an HTTP
// request (its request line, POST /…, or a Host header): what a web page's
// fetch() to the listener's port sends, its body RESP commands of the
// page's choosing. Redis (since 3.2.7) closes the connection on either,
// before anything after it runs; so does the listener, and on HTTP/2's
// preface too (PRI * HTTP/2.0).
func crossProtocol(name string) bool {
	return strings.EqualFold(name, "POST") || strings.EqualFold(name, "Host:") || name == "PRI"
}

// serve runs the session until the client leaves, breaks the protocol,
// or the server shuts down. It closes the connection.
func (s *session) serve() error {
	defer func() {
		s.raw.Close() // ends the read in progress
		s.in.stop()
	}()
	err := s.run()
	if errors.Is(err, os.ErrDeadlineExceeded) && s.in.atLimit() {
		s.srv.log.Warn("resp: client sent more than MaxReadAheadBytes without reading replies; the connection is closed",
			"peer", s.raw.RemoteAddr().String(), "limit", s.srv.cfg.MaxReadAheadBytes, "write_timeout", s.srv.cfg.WriteTimeout)
	}
	return err
}

// run reads, runs and answers commands (serve).
func (s *session) run() error {
	var next []string // read while batching, not yet handled
	for {
		args := next
		next = nil
		if args == nil {
			idle := !s.r.buffered()
			if idle {
				if err := s.flush(); err != nil {
					return err
				}
				if !s.waitIdle() {
					return ErrServerClosed
				}
			} else if s.srv.conns.Closing() {
				// A client that never stops pipelining still ends with
				// the server; what it sent and was not answered never ran.
				_ = s.flush()
				return ErrServerClosed
			}
			var err error
			s.beforeRead()
			args, err = s.r.command()
			if idle && !s.busy() {
				// Shutdown closed the session as it read: the command
				// does not run, as Shutdown told its client.
				return ErrServerClosed
			}
			if err != nil {
				return s.fail(err)
			}
		}
		if s.certExpired() {
			return errCertExpired
		}
		if h := s.srv.testHookCommand; h != nil {
			h(args)
		}
		if crossProtocol(args[0]) {
			s.srv.log.Warn("resp: a command named POST, Host: or PRI (an HTTP request: a web page's cross-protocol attack); the connection is closed, as Redis closes it",
				"peer", s.raw.RemoteAddr().String())
			return errCrossProtocol
		}
		k := kindOf(args[0])
		if k != kindData || s.multi || !s.authed {
			s.armWrite()
			if err := s.local(k, args); err != nil {
				_ = s.flush()
				return err
			}
			if err := s.w.err(); err != nil {
				return err
			}
			continue
		}
		// Every data command the client has already sent goes in one
		// write, so that a pipeline costs one script run, in order.
		batch := append(s.batch[:0], args)
		size := argBytes(args)
		var rerr error
		for len(batch) < s.srv.cfg.MaxPipelineBatch && size < s.srv.cfg.MaxCommandBytes && s.r.buffered() {
			a, err := s.r.command()
			if err != nil {
				rerr = err
				break
			}
			if kindOf(a[0]) != kindData {
				next = a
				break
			}
			batch = append(batch, a)
			size += argBytes(a)
		}
		s.batch = batch
		s.runBatch(batch)
		clear(s.batch)
		// Replies that could not be written end the session: nothing
		// more the client sent runs unanswered.
		if err := s.w.err(); err != nil {
			return err
		}
		if rerr != nil {
			return s.fail(rerr)
		}
	}
}

var errCertExpired = errors.New("resp: client certificate expired or its CA removed")

// certExpired refuses the first command read after the client
// certificate expired, or after a reload took the CA it was verified by
// out of the bundle (auth.ChainsInvalid), and ends the session: the
// identity fixed at the connection's start is proven no longer, as a new
// connection with the certificate would not be. The command does not
// run; the client is told UNAUTHENTICATED before the connection closes.
func (s *session) certExpired() bool {
	if s.certUntil.IsZero() {
		return false
	}
	now := time.Now()
	var why string
	if now.After(s.certUntil) {
		why = "client certificate expired at " + s.certUntil.UTC().Format(time.RFC3339)
	} else if why = auth.ChainsInvalid(s.chains, now); why == "" {
		return false
	}
	s.armWrite()
	s.last("UNAUTHENTICATED fencegate: " + why + "; the connection is closed")
	return true
}

// last writes the session's last reply, the error msg, and lets a
// logged-in client read it before the connection closes (Linger).
func (s *session) last(msg string) {
	s.w.error(msg)
	if s.flush() == nil && s.authed {
		listen.Linger(s.conn, s.r.br, -1, listen.LingerTime)
	}
}

func argBytes(args []string) int {
	n := 0
	for _, a := range args {
		n += len(a)
	}
	return n
}

// beforeRead holds a client that has not logged in to Redis's limits for
// unauthenticated clients, to AuthTimeout and to a read-ahead of one
// buffer.
func (s *session) beforeRead() {
	s.r.unauth = !s.authed
	switch {
	case !s.authed:
		if !s.readBy {
			s.in.setLimit(aheadSize)
		}
		_ = s.conn.SetReadDeadline(s.authBy)
		s.readBy = true
	case s.readBy:
		_ = s.conn.SetReadDeadline(time.Time{})
		s.readBy = false
		s.in.setLimit(s.srv.cfg.MaxReadAheadBytes)
	}
}

// fail answers a protocol error before the connection closes.
func (s *session) fail(err error) error {
	var pe *protocolError
	if errors.As(err, &pe) {
		s.last("ERR Protocol error: " + pe.msg)
		return err
	}
	if !s.authed && errors.Is(err, os.ErrDeadlineExceeded) {
		s.w.error(fmt.Sprintf("ERR fencegate: no AUTH within %v; the connection is closed", s.srv.cfg.AuthTimeout))
		_ = s.flush()
		return nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// The client closed its side, maybe inside a command (which
		// does not run): the answers to those before it, which ran, go
		// out, as Redis writes them.
		_ = s.flush()
		return nil
	}
	return err
}

func (s *session) flush() error {
	if s.w.bw.Buffered() == 0 {
		return nil
	}
	s.armWrite()
	return s.w.flush()
}

// armWrite moves the write deadline before replies are written: the
// buffer writes to the connection when it fills, not only at flush, and
// a deadline set before the session waited for its client, or before a
// write to Redis, may be past, failing a write of replies to writes that
// were applied. Moving it costs a timer update; moved when a quarter of
// WriteTimeout has passed, it stays ¾ to all of it away.
func (s *session) armWrite() {
	if now := time.Now(); now.Sub(s.deadlineSet) >= s.srv.cfg.WriteTimeout/4 {
		s.deadlineSet = now
		_ = s.conn.SetWriteDeadline(now.Add(s.srv.cfg.WriteTimeout))
	}
}

// waitIdle marks the session idle before it blocks reading, unless the
// server is shutting down.
func (s *session) waitIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv.conns.Closing() {
		return false
	}
	s.idle = true
	return true
}

// busy marks the session busy once it has read a command, and says
// whether it may run it: not if Shutdown closed it while it waited.
func (s *session) busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle = false
	return !s.closed
}

// CloseNow closes the session's connection now (Close): under TLS
// without close_notify, whose write blocks for up to 5 s to a client that
// reads nothing (and ends one CloseIfIdle sent).
func (s *session) CloseNow() { s.raw.Close() }

// CloseIfIdle closes a session waiting for its client; a busy one ends
// after answering what it has read (waitIdle).
func (s *session) CloseIfIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle {
		s.closed = true
		// Under TLS with close_notify: on its own, not under the
		// group's lock, one session after another (CloseNow).
		go s.conn.Close()
	}
}

// runBatch runs data commands and writes their replies in order.
func (s *session) runBatch(cmds [][]string) {
	if cap(s.out) < len(cmds) {
		s.out = make([]any, len(cmds))
	}
	out := s.out[:len(cmds)]
	s.exec(cmds, out)
	s.armWrite()
	for i, v := range out {
		if err, ok := v.(error); ok {
			s.w.error(errorText(err, true))
		} else {
			s.reply(cmds[i], v)
		}
	}
	clear(out)
}

// exec runs cmds as one fenced write, putting each command's reply or
// error in out. When the write is refused because of one command (not
// allowed, invalid, or failed in Redis and rolled back), nothing was
// applied: the commands before it run again as one write, it runs alone
// and gets its own answer, and the rest follow. So each pipelined command
// is answered as Redis would answer it, never aborted by another's error.
func (s *session) exec(cmds [][]string, out []any) {
	_, res, err := s.srv.gw.RedisBatch(s.ctx, s.fence, s.token, cmds, splits)
	if err == nil {
		copy(out, res)
		return
	}
	if i, ok := perCommand(err, len(cmds)); ok && len(cmds) > 1 {
		if i > 0 {
			s.exec(cmds[:i], out[:i])
		}
		s.exec(cmds[i:i+1], out[i:i+1])
		if i+1 < len(cmds) {
			s.exec(cmds[i+1:], out[i+1:])
		}
		return
	}
	for i := range out {
		out[i] = err
	}
}

// splits says exec runs a batch of n commands again in parts after err
// (RedisBatch leaves the refusal to the parts).
func splits(err error, n int) bool {
	_, ok := perCommand(err, n)
	return ok && n > 1
}

// perCommand returns the index of the command a refusal is about, when
// the refusal says nothing was applied because of that command alone.
func perCommand(err error, n int) (int, bool) {
	r, ok := tokens.AsRefusal(err)
	if !ok {
		return 0, false
	}
	switch r.Reason {
	case tokens.ReasonStatementFailed, tokens.ReasonCommandNotAllowed, tokens.ReasonInvalidRequest:
	default:
		return 0, false
	}
	if r.Metadata["outcome"] == "unknown" {
		return 0, false
	}
	i, perr := strconv.Atoi(r.Metadata["command"])
	if perr != nil || i < 0 || i >= n {
		return 0, false
	}
	return i, true
}

// errorText is the error reply for a refusal: Redis's own error as Redis
// sends it, or fencegate's reason first (API.md, "RESP"). proxy/redis
// sets metadata "error" only to an error Redis itself sent; its own
// refusals, such as an ACL check's ("permission"), carry none.
func errorText(err error, single bool) string {
	r, ok := tokens.AsRefusal(err)
	if !ok {
		return "ERR fencegate: " + err.Error()
	}
	if r.Reason == tokens.ReasonStatementFailed && r.Metadata["error"] != "" && r.Metadata["limit"] == "" {
		return r.Metadata["error"]
	}
	msg := r.Msg
	if single {
		msg = strings.TrimPrefix(msg, "command 0: ")
	}
	if r.Err != nil {
		msg += ": " + r.Err.Error()
	}
	if r.Metadata["outcome"] == "unknown" {
		// The write may have been applied: the client must not take
		// this for a refusal.
		msg += " (outcome unknown)"
	}
	return string(r.Reason) + " fencegate: " + msg
}

// upper upper-cases a short ASCII name into buf without allocating; a
// name longer than buf comes back empty (no command of interest is).
func upper(s string, buf *[16]byte) string {
	if len(s) > len(buf) {
		return ""
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		buf[i] = c
	}
	return string(buf[:len(s)])
}

// kind is what fencegate does with a command: answer it itself, or run
// it in Redis, fenced.
type kind uint8

const (
	kindData kind = iota
	kindPing
	kindEcho
	kindSelect
	kindClient
	kindQuit
	kindReset
	kindHello
	kindAuth
	kindCommand
	kindMulti
	kindExec
	kindDiscard
	kindWatch
	kindUnwatch
	kindInfo
	kindCluster
)

func kindOf(name string) kind {
	var buf [16]byte
	switch upper(name, &buf) {
	case "PING":
		return kindPing
	case "ECHO":
		return kindEcho
	case "SELECT":
		return kindSelect
	case "CLIENT":
		return kindClient
	case "QUIT":
		return kindQuit
	case "RESET":
		return kindReset
	case "HELLO":
		return kindHello
	case "AUTH":
		return kindAuth
	case "COMMAND":
		return kindCommand
	case "MULTI":
		return kindMulti
	case "EXEC":
		return kindExec
	case "DISCARD":
		return kindDiscard
	case "WATCH":
		return kindWatch
	case "UNWATCH":
		return kindUnwatch
	case "INFO":
		return kindInfo
	case "CLUSTER", "READONLY", "READWRITE", "ASKING":
		return kindCluster
	}
	return kindData
}

// local answers a command fencegate handles itself, queues one inside
// MULTI, or refuses a data command before AUTH. It returns errQuit when
// the session ends.
func (s *session) local(k kind, args []string) error {
	w := s.w
	if s.multi {
		switch k {
		case kindData:
			switch {
			case !s.authed:
				s.dirty = true
				w.error(noAuth)
			case len(s.queued) >= s.srv.cfg.MaxQueued:
				s.multiOverLimit("more than %d commands in one MULTI (one fenced write)", s.srv.cfg.MaxQueued)
			case s.queuedBytes+argBytes(args) > s.srv.cfg.MaxCommandBytes:
				// As a pipelined batch is bounded: what EXEC sends as one
				// script, held until then.
				s.multiOverLimit("more than %d bytes in one MULTI (one fenced write)", s.srv.cfg.MaxCommandBytes)
			default:
				s.queued = append(s.queued, args)
				s.queuedBytes += argBytes(args)
				w.status("QUEUED")
			}
			return nil
		case kindExec, kindDiscard, kindMulti, kindWatch, kindQuit, kindReset:
		default:
			s.dirty = true
			w.errorf("ERR fencegate: %s inside MULTI is not supported", strings.ToUpper(args[0]))
			return nil
		}
	}
	switch k {
	case kindData:
		w.error(noAuth)
	case kindPing:
		switch len(args) {
		case 1:
			w.status("PONG")
		case 2:
			w.bulk(args[1])
		default:
			arity(w, args)
		}
	case kindEcho:
		if len(args) != 2 {
			arity(w, args)
			return nil
		}
		w.bulk(args[1])
	case kindSelect:
		switch {
		case len(args) != 2:
			arity(w, args)
		case args[1] == "0":
			w.status("OK")
		default:
			w.errorf("COMMAND_NOT_ALLOWED fencegate: SELECT %.20s: only database 0 is reachable through fencegate", args[1])
		}
	case kindClient:
		s.client(args)
	case kindQuit:
		w.status("OK")
		return errQuit
	case kindReset:
		s.reset()
		w.status("RESET")
	case kindHello:
		s.hello(args)
	case kindAuth:
		switch len(args) {
		case 2:
			if s.fence == "" {
				w.error("WRONGPASS fencegate: AUTH <fence> <token>: the user name is the fence (redis-cli --user <fence> --pass <token>)")
				return nil
			}
			s.auth(s.fence, args[1])
		case 3:
			s.auth(args[1], args[2])
		default:
			arity(w, args)
		}
	case kindCommand:
		s.command(args)
	case kindMulti:
		if s.multi {
			w.error("ERR MULTI calls can not be nested")
			return nil
		}
		s.multi = true
		w.status("OK")
	case kindExec:
		s.execMulti()
	case kindDiscard:
		if !s.multi {
			w.error("ERR DISCARD without MULTI")
			return nil
		}
		s.endMulti()
		w.status("OK")
	case kindWatch:
		if s.multi {
			w.error("ERR WATCH inside MULTI is not allowed")
			return nil
		}
		w.error("COMMAND_NOT_ALLOWED fencegate: WATCH is not supported: EXEC runs the queued commands as one atomic fenced script, and nothing else can be watched through fencegate")
	case kindUnwatch:
		w.status("OK") // nothing is ever watched
	case kindInfo:
		info(w, args[1:])
	case kindCluster:
		// What a Redis without cluster mode answers, whatever the token:
		// clients that probe for a cluster (rueidis sends CLUSTER SLOTS
		// as it connects) then treat fencegate as one standalone Redis.
		w.error(noCluster)
	}
	return nil
}

const noCluster = "ERR This instance has cluster support disabled"

const noAuth = "NOAUTH fencegate: authentication required: AUTH <fence> <token> (redis-cli --user <fence> --pass <token>)"

func arity(w *writer, args []string) {
	w.errorf("ERR wrong number of arguments for '%.32s' command", strings.ToLower(args[0]))
}

// auth sets the connection's fence and token after checking their form,
// and answers +OK; the token is decided on with every command. A refused
// AUTH keeps the previous ones.
func (s *session) auth(fence, token string) {
	if msg := s.checkAuth(fence, token); msg != "" {
		s.w.error(msg)
		return
	}
	s.fence, s.token, s.authed = fence, token, true
	s.w.status("OK")
}

// checkAuth returns the error reply for a fence or token of the wrong
// form, or "".
func (s *session) checkAuth(fence, token string) string {
	// A fence or token of the wrong form is a refused write, recorded as
	// one (Gateway.RefusedLogin).
	refused := func(r tokens.Reason, format string, args ...any) string {
		s.srv.gw.RefusedLogin(s.ctx, policy.ActionRedisWrite, fence, token, tokens.Refuse(r, fence, 0, format, args...))
		return string(r) + " fencegate: " + fmt.Sprintf(format, args...)
	}
	if !proxy.ValidFenceName(fence, s.srv.cfg.MaxFenceName) {
		return refused(tokens.ReasonInvalidRequest, "fence name %.64q: want 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", fence, s.srv.cfg.MaxFenceName)
	}
	if _, err := tokens.Parse(token); err != nil {
		if errors.Is(err, tokens.ErrMissing) {
			return refused(tokens.ReasonMissingToken, "AUTH <fence> <token> needs a token")
		}
		return refused(tokens.ReasonInvalidToken, "fencing token %.32q is not a decimal integer in [1, 2^64)", token)
	}
	// A caller without the identity the gateway requires, every write of
	// which would be refused, does not log in: it stays under AuthTimeout
	// and the limits before AUTH. (One the policy denies this fence is
	// identified, and told NOT_AUTHORIZED at each write, as over HTTP.)
	if err := s.srv.gw.Authenticated(s.ctx, fence); err != nil {
		return errorText(err, false)
	}
	return ""
}

func (s *session) reset() {
	s.endMulti()
	if s.authed {
		// Logged out: AuthTimeout runs again. Not for a client that never
		// logged in, which could otherwise RESET to stay for ever.
		s.authBy = time.Now().Add(s.srv.cfg.AuthTimeout)
	}
	s.fence, s.token, s.authed, s.name = "", "", false, ""
	s.w.resp3 = false
}

// multiOverLimit aborts the MULTI over a limit: the client is told at
// the command, and EXEC counts and audits it (overLimit).
func (s *session) multiOverLimit(format string, n int) {
	s.dirty = true
	s.overLimit = tokens.Refuse(tokens.ReasonInvalidRequest, s.fence, 0, format, n)
	s.w.error("ERR fencegate: " + s.overLimit.Msg)
}

func (s *session) endMulti() {
	clear(s.queued)
	s.multi, s.dirty, s.queued, s.queuedBytes, s.overLimit = false, false, s.queued[:0], 0, nil
}

// execMulti runs the queued commands as one fenced write: all or nothing.
func (s *session) execMulti() {
	w := s.w
	if !s.multi {
		w.error("ERR EXEC without MULTI")
		return
	}
	defer s.endMulti()
	if s.dirty {
		if s.overLimit != nil {
			// A write refused as the same write over HTTP is: counted
			// and audited (the client was told at the command).
			_ = s.srv.gw.RefuseRequest(s.ctx, policy.ActionRedisWrite, s.fence, s.token, s.overLimit)
		}
		w.error("EXECABORT Transaction discarded because of previous errors.")
		return
	}
	if len(s.queued) == 0 {
		w.array(0)
		return
	}
	_, res, err := s.srv.gw.Redis(s.ctx, s.fence, s.token, s.queued)
	s.armWrite()
	if err != nil {
		if _, ok := perCommand(err, len(s.queued)); ok {
			w.error("EXECABORT Transaction discarded, nothing applied: " + errorText(err, false))
			return
		}
		w.error(errorText(err, false))
		return
	}
	w.array(len(res))
	for i, v := range res {
		s.reply(s.queued[i], v)
	}
}

func (s *session) client(args []string) {
	w := s.w
	if len(args) < 2 {
		arity(w, args)
		return
	}
	switch sub := strings.ToUpper(args[1]); sub {
	case "SETNAME":
		if len(args) != 3 {
			arity(w, args)
			return
		}
		if strings.ContainsAny(args[2], " \n\r") {
			w.error("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		s.name = args[2]
		w.status("OK")
	case "GETNAME":
		if s.name == "" {
			w.null()
			return
		}
		w.bulk(s.name)
	case "SETINFO":
		if len(args) != 4 {
			arity(w, args)
			return
		}
		w.status("OK")
	case "ID":
		w.integer(s.id)
	default:
		w.errorf("ERR fencegate: CLIENT %.32s is not supported", sub)
	}
}

// command answers enough of COMMAND for redis-cli and client libraries:
// no command documentation.
func (s *session) command(args []string) {
	if len(args) == 1 {
		s.w.array(0)
		return
	}
	switch strings.ToUpper(args[1]) {
	case "COUNT":
		s.w.integer(0)
	case "DOCS":
		s.w.mapHeader(0)
	case "INFO":
		s.w.array(len(args) - 2)
		for range args[2:] {
			s.w.null()
		}
	default:
		s.w.array(0)
	}
}

// redisVersion is the version HELLO and INFO report: the Redis whose
// commands and replies the listener speaks (shape.go).
const redisVersion = "7.0.0"

// infoSections is what INFO tells a client: the fields clients read at
// start, consistent with HELLO's answer, and nothing of the Redis behind
// fencegate, whose INFO stays an administrative command out of a worker's
// reach. ioredis sends INFO after AUTH and reads loading:0 before it
// sends anything else.
var infoSections = [...]struct{ name, text string }{
	{"server", "# Server\r\nredis_version:" + redisVersion + "\r\nredis_mode:standalone\r\nproxy:fencegate\r\n"},
	{"persistence", "# Persistence\r\nloading:0\r\n"},
	{"replication", "# Replication\r\nrole:master\r\n"},
}

// info answers INFO [section ...] as Redis 7 does: the default sections
// without arguments or with default, all or everything; the named ones
// otherwise, an unknown name adding nothing.
func info(w *writer, sections []string) {
	var b strings.Builder
	for _, sec := range infoSections {
		want := len(sections) == 0
		for _, a := range sections {
			switch strings.ToLower(a) {
			case sec.name, "default", "all", "everything":
				want = true
			}
		}
		if want {
			if b.Len() > 0 {
				b.WriteString("\r\n")
			}
			b.WriteString(sec.text)
		}
	}
	w.bulk(b.String())
}

// hello answers HELLO [protover [AUTH fence token] [SETNAME name]].
func (s *session) hello(args []string) {
	w := s.w
	proto := 2
	if w.resp3 {
		proto = 3
	}
	if len(args) > 1 {
		v, err := strconv.Atoi(args[1])
		if err != nil {
			w.error("ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			w.error("NOPROTO unsupported protocol version")
			return
		}
		proto = v
	}
	var fence, token, name string
	var doAuth, doName bool
	for i := 2; i < len(args); i++ {
		switch strings.ToUpper(args[i]) {
		case "AUTH":
			if i+2 >= len(args) {
				w.errorf("ERR Syntax error in HELLO option '%.32s'", args[i])
				return
			}
			fence, token, doAuth = args[i+1], args[i+2], true
			i += 2
		case "SETNAME":
			if i+1 >= len(args) {
				w.errorf("ERR Syntax error in HELLO option '%.32s'", args[i])
				return
			}
			name, doName = args[i+1], true
			i++
		default:
			w.errorf("ERR Syntax error in HELLO option '%.32s'", args[i])
			return
		}
	}
	if doAuth {
		if msg := s.checkAuth(fence, token); msg != "" {
			w.error(msg)
			return
		}
		s.fence, s.token, s.authed = fence, token, true
	}
	if doName {
		s.name = name
	}
	w.resp3 = proto == 3
	w.mapHeader(7)
	w.bulk("server")
	w.bulk("redis")
	w.bulk("version")
	w.bulk(redisVersion)
	w.bulk("proto")
	w.integer(int64(proto))
	w.bulk("id")
	w.integer(s.id)
	w.bulk("mode")
	w.bulk("standalone")
	w.bulk("role")
	w.bulk("master")
	w.bulk("modules")
	w.array(0)
}
