package pgwire

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/audit"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/tokens"
)

// own says whose a message to the server is.
type own uint8

const (
	ownClient  own = iota // the client's: replies pass through
	ownCheck              // fencegate's fence check: replies dropped, its error is the refusal
	ownRefusal            // fails on purpose in place of a refused message: its error is rewritten
	ownAborted            // fails in a failed block, as the message in its place would: its error passes through
)

// reply is one entry of the outstanding-request queue: a message sent to
// the server whose replies have not all come back yet, in order.
type reply struct {
	// msg is the message: 'Q', 'P', 'B', 'D', 'E', 'C' (Close) or 'S'.
	msg    byte
	own    own
	kind   stmtKind         // Execute: of the portal's statement
	prefix int              // Query: bytes of fence check before the client's SQL
	passed bool             // Query with prefix: the check's replies are all in
	adm    *proxy.Admission // ownCheck, and Query with prefix
	why    *tokens.RefusalError
	chg    int32 // index into session.changes, or -1
	nchg   int32 // Query: the changes from chg on, confirmed together (pushQuery)
	text   string
	// synth, for a Query fencegate rewrote (DISCARD ALL), is the command
	// tag the client sees in place of its statements' answers, unless
	// one failed (failed).
	synth  string
	failed bool
	// setup, for a Query whose check follows the statements that set up
	// its transaction, is how many of those are not yet answered; at is
	// where the check begins in the client's SQL, in characters.
	setup, at int
	// deferred: the client's statement that set up a transaction whose
	// check comes later (pendingCheck); its text goes into the
	// transaction's audit fingerprint then.
	deferred bool
	// mayCopy: a Query or Execute of the client's with COPY FROM STDIN,
	// which may put the server in copy-in (copyGate); counted in
	// session.copyOut.
	mayCopy bool
	// vd, for a Query or Execute of the client's, is what fencegate
	// learnt of its statements; op counts the answers to vd.rows
	// countRows has read.
	vd *verdict
	op int
}

// change is a statement or portal a client's Parse, Bind or Close makes
// or removes; it holds once the server confirms it (S2C sets ok), and is
// applied to the session's maps at the next segment's start.
type change struct {
	what byte   // 'P' Parse, 'B' Bind, 's' Close statement, 'p' Close portal, 'S' every statement (DEALLOCATE ALL)
	name string // nameKey's
	vd   *verdict
	ok   bool
}

// session is one client connection and its server connection. C2S
// (clientLoop) reads the client and writes the server; S2C (serverLoop)
// reads the server and writes the client. Both write the client (fencegate
// answers some messages itself) under cwMu.
type session struct {
	s              *Server
	client, server net.Conn
	toServer       *gate // what sw writes to
	cr, sr         *msgReader
	cwMu           sync.Mutex
	cw, sw         *bufio.Writer
	ctx            context.Context
	fence, user    string
	token          string // raw, as the client gave it
	cancelPID      uint32 // the process id the client was given (BackendKeyData)
	serverPID      uint32 // the server connection's own
	closeOnce      sync.Once
	doneOnce       sync.Once
	// killed is why fencegate ended the session's transaction (its term
	// ended, or the policy no longer allows its caller); close tells the
	// client.
	killed atomic.Pointer[tokens.RefusalError]
	// shutdown says the session ends because the server shuts down, with
	// no transaction open; close tells the client, as PostgreSQL does.
	shutdown atomic.Bool
	// clientGone: the client left (leave); nothing more is written to it.
	clientGone atomic.Bool
	// certUntil is when the client certificate the session logged in
	// with expires (certExpired), chains its verified chains
	// (certValid); zero and nil without one.
	certUntil time.Time
	chains    [][]*x509.Certificate

	// The queue, and what S2C learnt from the server; under qmu.
	qmu     sync.Mutex
	qcond   sync.Cond
	q       []reply // ring
	qhead   int
	qlen    int
	syncs   int  // Query and Sync messages not yet answered
	status  byte // of the last ReadyForQuery
	discard bool // the server skips to the next Sync after an error
	dead    bool
	// unsent: S2C has taken a ReadyForQuery off the queue and not yet
	// written it to the client. The session is not idle until it has:
	// closed in between, a client whose COMMIT committed would read
	// 57P01 in place of its answer.
	unsent bool
	// lexical is why the server may read a backslash in SQL text
	// otherwise than fencegate does (its last ParameterStatus of
	// standard_conforming_strings or client_encoding), or "".
	lexical lexicalSettings
	changes []change
	// COPY FROM STDIN (copyGate): copyOut counts the queue's entries
	// that may put the server in copy-in (mayCopy); copyIn says the
	// server is in copy-in as far as fencegate knows, from its
	// CopyInResponse to the client's CopyDone or CopyFail or the end
	// of the COPY the server gives (its CommandComplete or error).
	copyOut int
	copyIn  bool
	peak    int                // the queue's longest, folded into Server.peakQueued at the end
	notRun  []*proxy.Admission // checks the server skipped, for Done

	// C2S only.
	out        []byte
	bound      bool      // BindSession was called for the server connection's process
	startBy    time.Time // the connection's start must be over by then (StartupTimeout)
	segStart   bool
	segStatus  byte   // the transaction status the segment started in
	segLexical string // lexical.why() as the segment started
	needCheck  bool   // the next message starts a transaction not yet fenced
	// checkOnce is Server.testPrepareOnce as the session started;
	// checkPrepared, whether check prepared the check once so.
	checkOnce, checkPrepared bool
	// pendingCheck: a block is open that only BEGIN or SET TRANSACTION
	// ran in, without the check, which its first statement gets;
	// deferrals counts those statements, at most maxDeferrals.
	pendingCheck bool
	deferrals    int
	fresh        bool // nothing of the segment is sent yet
	swallow      bool // drop client messages until Sync
	localRFQ     bool // and answer that Sync with ReadyForQuery 'I' ourselves
	// localVd, when set, is the extended-protocol SET fencegate.token or
	// SHOW fencegate.* whose segment C2S answers itself (localSegment),
	// the statement named localName: localBound says the unnamed portal
	// is bound to it, localRan that a SET's Execute ran, localBinary that
	// the Bind asked for binary results; local holds the answers not yet
	// written.
	localVd     *verdict
	localName   string
	localBound  bool
	localRan    bool
	localBinary bool
	copies      bool // a COPY FROM STDIN was sent: copyGate looks at what follows
	local       []byte
	// stmts and portals, segStmts and segPortals, and localName hold
	// names as PostgreSQL tells them apart (nameKey).
	stmts   map[string]*verdict
	portals map[string]*verdict
	// The latest of this segment's changes to each statement and portal
	// name: indexes into changes.
	segStmts, segPortals map[string]int32

	// S2C only.
	sout []byte
	// open is the fenced transaction in progress: stored under qmu (by
	// S2C, and done), read without it by Server.sweep.
	open atomic.Pointer[proxy.Admission]
	// rows are the rows the open transaction's statements changed, as
	// their tags say (countRows); saves, the savepoints it holds, each
	// with the rows before it, in order: the latest maxSaves of them.
	// Past that the oldest half is let go (savesLost) and savesFloor
	// keeps the rows before the oldest let go, the fewest (rows only grow
	// up the stack), so that a ROLLBACK TO one of them still counts no
	// more than was written.
	rows       int64
	saves      []savepoint
	savesLost  bool
	savesFloor int64
	// What the server said of the open transaction since its check
	// passed, for the outcome Done is told (outcome): the last tag that
	// ends a transaction (endCommit, endOther; ROLLBACK TO SAVEPOINT's is
	// "ROLLBACK" too, and a later COMMIT overrides it), and its first
	// error.
	lastEnd byte
	failure *tokens.RefusalError
	// digest fingerprints the open transaction's statements for the
	// audit log as they complete, in constant memory.
	digest audit.Digest
	// setup fingerprints the deferred statements, those that set up a
	// transaction before its check, until the check passes (and setup
	// becomes digest) or the transaction ends: in constant memory too, as
	// they run before the token is judged, a zombie's included.
	setup audit.Digest
}

// close closes both connections: the server first, so an open
// transaction is rolled back whatever the client does. It also wakes C2S
// where it waits for answers (room, startSegment): none will come, and a
// closed connection does not wake a condition variable. close must not be
// called with qmu held.
func (c *session) close() {
	c.closeOnce.Do(func() {
		c.server.Close()
		if r := c.killed.Load(); r != nil {
			c.tellFatal(r)
		} else if c.shutdown.Load() {
			c.tellClient(pgError{Severity: "FATAL", Code: "57P01", Message: shutdownMessage})
		}
		c.client.Close()
		c.qmu.Lock()
		c.dead = true
		c.qcond.Broadcast()
		c.qmu.Unlock()
	})
}

// gate is the server connection as C2S writes it: once shut, nothing
// more reaches the server.
type gate struct {
	net.Conn
	shut atomic.Bool
}

func (g *gate) Write(p []byte) (int, error) {
	if g.shut.Load() {
		return 0, errClosed
	}
	return g.Conn.Write(p)
}

// endTransaction ends the session's open transaction, admitted as a,
// because its term ended or the policy no longer allows its caller (why,
// from a.Ended): the server connection closes, so the server rolls back
// what it has not committed and the fence's row is free for the next
// term, and a statement still running is cancelled (and its backend
// terminated, unbind); the client gets a FATAL error saying why and its
// connection closes. It does nothing, and says false, if a is no longer
// the session's transaction or the session is ending already. A failed
// one is ended too: the status the server reports ('E') is the same for a
// block whose error aborted only a savepoint's subtransaction, whose top
// level still holds the fence's row, and for one that a ROLLBACK TO
// SAVEPOINT makes usable again.
//
// A session waiting for its client, every message answered, is shut in
// the same step: C2S queues each message before it writes it, so none
// can reach the server after this check, and the transaction is rolled
// back for certain (the client is told so). A session with messages in
// flight may be committing: the client is told only that fencegate ended
// the transaction. The decision is taken on the caller's goroutine, the
// closing on one of its own.
func (c *session) endTransaction(a *proxy.Admission, why *tokens.RefusalError) bool {
	end, busy := c.end(func() bool { return c.open.Load() == a }, func(busy bool) *tokens.RefusalError {
		r := *why
		if busy {
			r.Msg += "; its open transaction is ended and the connection closed (a COMMIT already sent may have committed)"
			r.Metadata = maps.Clone(r.Metadata)
			if r.Metadata == nil {
				r.Metadata = map[string]string{}
			}
			r.Metadata["outcome"] = "unknown"
		} else {
			r.Msg += "; its open transaction is rolled back and the connection closed"
		}
		return &r
	})
	if end {
		go c.closeEnded(a, why, busy)
	}
	return end
}

// end decides, once, that the session ends with the refusal refusal(busy)
// (killed, which close tells the client), when ok holds of it: under qmu,
// so that a session with nothing in flight (not busy) has its gate to the
// server shut in the same step, and no message of the client's reaches
// the server after the decision. ended says this call decided it.
func (c *session) end(ok func() bool, refusal func(busy bool) *tokens.RefusalError) (ended, busy bool) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	busy = c.qlen > 0
	if c.dead || !ok() {
		return false, busy
	}
	if !busy {
		c.toServer.shut.Store(true)
	}
	return c.killed.CompareAndSwap(nil, refusal(busy)), busy
}

// closeEnded is endTransaction's I/O, on a goroutine of its own: the
// server connection first, so the row is free as soon as it can be.
func (c *session) closeEnded(a *proxy.Admission, why *tokens.RefusalError, busy bool) {
	if h := c.s.testHookEnding; h != nil {
		h()
	}
	ck := c.s.cancels.get(c.cancelPID)
	c.server.Close()
	if busy && ck != nil {
		c.s.cancel(ck)
	}
	c.close()
	outcome := "rolled back"
	if busy {
		outcome = "unknown: messages were in flight"
	}
	msg := "pgwire: transaction ended with its term, connection closed"
	if why.Reason == tokens.ReasonNotAuthorized {
		msg = "pgwire: transaction ended: the policy no longer allows its caller, connection closed"
	}
	c.s.log.Warn(msg, "outcome", outcome,
		"fence", c.fence, "user", c.user, "token", a.Token(), "reason", why.Reason, "peer", c.client.RemoteAddr().String())
}

// certExpired ends the session as its client certificate expires
// (certEnd).
func (c *session) certExpired() {
	c.certEnd("client certificate expired at " + c.certUntil.UTC().Format(time.RFC3339))
}

// certValid says the client certificate the session logged in with still
// proves who it names, at a message of the client's; else it ends the
// session (certEnd): the certificate expired, or a reload took the CA it
// was verified by out of the bundle (auth.ChainsInvalid), which no timer
// foresees.
func (c *session) certValid() bool {
	if c.chains == nil {
		return true
	}
	now := time.Now()
	if now.After(c.certUntil) {
		c.certExpired()
		return false
	}
	why := auth.ChainsInvalid(c.chains, now)
	if why == "" {
		return true
	}
	c.certEnd(why)
	return false
}

// certEnd ends the session because its client certificate proves, as
// why says, the identity it logged in with no longer, as a new connection
// with the certificate would not. The client is told FATAL 28000; the
// server connection closes first (close), so an open transaction is
// rolled back, and a session waiting for its client is shut in the same
// step, as endTransaction shuts one.
func (c *session) certEnd(why string) {
	end, _ := c.end(func() bool { return true }, func(busy bool) *tokens.RefusalError {
		r := tokens.Refuse(tokens.ReasonUnauthenticated, c.fence, 0, "%s; the connection is closed", why)
		if busy {
			r.Msg += " (a COMMIT already sent may have committed)"
		}
		return r
	})
	if !end {
		return // ended already
	}
	c.close()
	c.s.log.Warn("pgwire: client certificate no longer valid, connection closed", "reason", why,
		"fence", c.fence, "user", c.user, "peer", c.client.RemoteAddr().String())
}

// tellFatal writes the client r as a FATAL error (a transaction ended
// with its term, a message over the limit), waiting at most a second: a
// client that does not read (a paused process) must not hold the session
// open.
func (c *session) tellFatal(r *tokens.RefusalError) {
	e := refusalPgError(r)
	e.Severity = "FATAL"
	c.tellClient(e)
}

// tellClient sends the client e, its last message.
func (c *session) tellClient(e pgError) {
	_ = c.client.SetWriteDeadline(time.Now().Add(time.Second)) // also frees a write S2C is blocked in
	c.cwMu.Lock()
	defer c.cwMu.Unlock()
	_, _ = c.cw.Write(appendError(nil, e))
	_ = c.cw.Flush()
}

// shutdownMessage is what a session's client reads when fencegate shuts
// down with no transaction of its open: PostgreSQL's own words for a
// server shutting down (SQLSTATE 57P01, admin_shutdown), which drivers and
// pools take as a reason to reconnect.
const shutdownMessage = "fencegate: terminating connection due to administrator command: fencegate is shutting down"

// CloseNow closes the session (Close); the server rolls back an open
// transaction.
func (c *session) CloseNow() { c.close() }

// CloseIfIdle closes the session if no transaction is open and nothing
// is outstanding (Shutdown). The status of the last ReadyForQuery is not
// enough: a client in the extended protocol may have begun a transaction
// and run statements in it, answered, without a Sync yet; its check has
// passed (open). Nor is an empty queue: the last ReadyForQuery may be
// off it and not yet written (unsent), and S2C ends the session after
// writing it (answered). It closes on its own goroutine: telling a client that
// does not read may take a second, and the listener's lock is held here.
func (c *session) CloseIfIdle() {
	c.qmu.Lock()
	idle := c.idle()
	if idle {
		// Shut in the same step, as endTransaction does: C2S queues each
		// message before it writes it, so none reaches the server after
		// this check, and the client told 57P01 ran nothing more. The
		// reason is set first: C2S, failing to write, closes too.
		c.shutdown.Store(true)
		c.toServer.shut.Store(true)
	}
	c.qmu.Unlock()
	if idle {
		go c.close()
	}
}

// idle says no transaction is open and every answer is written to the
// client; under qmu.
func (c *session) idle() bool {
	return c.qlen == 0 && c.status == 'I' && c.open.Load() == nil && !c.unsent
}

// answered records that S2C has written the client a ReadyForQuery, and
// says whether the session is to end now because the server shuts down:
// it is idle, and is shut in the same step (CloseIfIdle). Shutdown calls
// CloseIfIdle after the group is Closing, so a session one of them finds
// unsent, the other finds Closing.
func (c *session) answered() bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	c.unsent = false
	c.qcond.Broadcast() // waitAnswered
	end := c.idle() && c.s.conns.Closing()
	if end {
		c.shutdown.Store(true)
		c.toServer.shut.Store(true)
	}
	return end
}

// waitAnswered waits until every Query and Sync sent is answered and
// the answer written to the client, or the session is dead; under qmu.
// What C2S writes the client itself goes after them, as the client
// matches answers to what it sent in order.
func (c *session) waitAnswered() {
	for c.awaiting() {
		c.qcond.Wait()
	}
}

// awaiting says a Query or Sync sent is not yet answered and written to
// the client, on a live session; under qmu.
func (c *session) awaiting() bool { return (c.syncs > 0 || c.unsent) && !c.dead }

// tooLongWait bounds how long the FATAL for a message over the limit
// waits for the answers before it: a client that breaks the protocol in
// the middle of a COPY (the server waits for its data, not its Sync)
// would otherwise hold the session until its term ends.
const tooLongWait = 10 * time.Second

// waitAnsweredFor is waitAnswered for at most d; not under qmu.
func (c *session) waitAnsweredFor(d time.Duration) {
	expired := false
	t := time.AfterFunc(d, func() {
		c.qmu.Lock()
		expired = true
		c.qcond.Broadcast()
		c.qmu.Unlock()
	})
	defer t.Stop()
	c.qmu.Lock()
	for c.awaiting() && !expired {
		c.qcond.Wait()
	}
	c.qmu.Unlock()
}

// run serves the session until either side closes. A client that leaves
// mid-transaction takes the server connection with it: the server rolls
// the transaction back.
func (c *session) run() {
	// COPY data, rows and a Bind's parameters are not read, only passed
	// on: a message larger than the buffer goes through it as it
	// arrives, never held whole.
	c.cr.streams, c.sr.streams = "dB", "Dd"
	errc := make(chan error, 1)
	go func() { errc <- c.contain(c.serverLoop); c.close() }()
	err := c.contain(c.clientLoop)
	left := errors.Is(err, errClientLeft)
	if left {
		// The server ends the session once it has run what the client
		// sent before it left; a statement still running after
		// leaveGrace is ended as any of a client gone (done).
		t := time.NewTimer(leaveGrace)
		select {
		case err = <-errc:
			t.Stop()
			c.done(err)
			return
		case <-t.C:
		}
	}
	c.close()
	if e := <-errc; err == nil || left {
		err = e
	}
	c.done(err)
}

// contain runs loop, C2S or S2C, and turns a panic in it (a bug) into
// the end of this session alone, logged with its stack: the server
// connection closes, so an open transaction rolls back, and the client is
// told why; the process and every other session go on, as net/http keeps
// serving after a handler panics.
func (c *session) contain(loop func() error) (err error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		c.s.log.Error("pgwire: internal error; the session is closed", "panic", v, "fence", c.fence, "user", c.user,
			"peer", c.client.RemoteAddr().String(), "stack", string(debug.Stack()))
		c.killed.CompareAndSwap(nil, tokens.Refuse(tokens.ReasonBackendUnavailable, c.fence, 0,
			"internal error in fencegate's PostgreSQL listener; the connection is closed and its open transaction rolled back"))
		c.close()
		err = fmt.Errorf("pgwire: panic: %v", v)
	}()
	return loop()
}

// leaveGrace is how long a session whose client left may run what the
// client sent before it left (leave): a COMMIT, the end of a COPY.
const leaveGrace = 2 * time.Second

// done calls Done for every admission still open, and ends the
// session's binding to its fence, once; after close.
func (c *session) done(_ error) {
	c.doneOnce.Do(func() {
		if c.cancelPID != 0 {
			c.s.cancels.remove(c.cancelPID)
		}
		c.qmu.Lock()
		c.dead = true
		open := c.open.Swap(nil)
		c.qcond.Broadcast()
		for p := int64(c.peak); ; {
			if old := c.s.peakQueued.Load(); old >= p || c.s.peakQueued.CompareAndSwap(old, p) {
				break
			}
		}
		var adms []*proxy.Admission
		for i := 0; i < c.qlen; i++ {
			if g := &c.q[(c.qhead+i)%len(c.q)]; g.adm != nil && (g.msg != 'Q' || !g.passed) {
				adms = append(adms, g.adm)
			}
		}
		adms = append(adms, c.notRun...)
		c.notRun = nil
		busy := c.qlen > 0
		c.qmu.Unlock()
		if open != nil {
			// The connection closed with the transaction open: it
			// committed only if a COMMIT in flight did.
			why := c.killed.Load()
			switch {
			case why != nil:
				// fencegate ended it (endTransaction, certEnd, contain).
			case busy:
				why = tokens.Refuse(tokens.ReasonBackendUnavailable, c.fence, open.Token(),
					"the connection closed with messages in flight (a COMMIT already sent may have committed)")
				why.Metadata = map[string]string{"outcome": "unknown"}
			case c.failure != nil:
				why = c.failure
			case c.clientGone.Load():
				why = withdrawn // the database rolled it back
			default:
				why = tokens.Refuse(tokens.ReasonBackendUnavailable, c.fence, open.Token(),
					"the session's connection to the database closed with the transaction open; the database rolled it back")
			}
			c.finish(open, why)
		}
		for _, a := range adms {
			a.Done(tokens.Refuse(tokens.ReasonBackendUnavailable, c.fence, a.Token(), "connection closed before the fence check's answer"), "", 0)
		}
		c.unbind(busy)
	})
}

// push appends g to the queue.
func (c *session) push(g reply) {
	c.qmu.Lock()
	if g.mayCopy && c.discard && !c.syncQueued() {
		// The server skips it, after an error, to the next Sync: it
		// starts no COPY, and S2C drops it when that Sync is answered.
		g.mayCopy = false
	}
	if c.qlen == len(c.q) {
		n := make([]reply, max(16, 2*len(c.q)))
		for i := 0; i < c.qlen; i++ {
			n[i] = c.q[(c.qhead+i)%len(c.q)]
		}
		c.q, c.qhead = n, 0
	}
	c.q[(c.qhead+c.qlen)%len(c.q)] = g
	c.qlen++
	c.peak = max(c.peak, c.qlen)
	if g.msg == 'S' || g.msg == 'Q' {
		c.syncs++
	}
	if g.mayCopy {
		c.copies = true
		c.copyOut++
	}
	c.qmu.Unlock()
}

// syncQueued says a Sync is in the queue; under qmu.
func (c *session) syncQueued() bool {
	for i := 0; i < c.qlen; i++ {
		if c.q[(c.qhead+i)%len(c.q)].msg == 'S' {
			return true
		}
	}
	return false
}

// pushQuery queues g, a Query's reply, with the changes its statements
// make to the session's prepared statements (verdict.drops), confirmed
// together by its ReadyForQuery without an error. A Query ends its
// segment, so nothing after it in the segment looks them up. Past
// maxChanges they are not recorded: fencegate then keeps statements the
// server dropped, which fails safe (a name it knows is judged by what it
// was).
func (c *session) pushQuery(g reply) {
	if drops := g.vd.drops; len(drops) > 0 && len(c.changes)+len(drops) <= maxChanges {
		c.qmu.Lock()
		g.chg, g.nchg = int32(len(c.changes)), int32(len(drops))
		c.changes = append(c.changes, drops...)
		c.qmu.Unlock()
	}
	c.push(g)
}

// pushChange records a change and the reply that confirms it.
func (c *session) pushChange(g reply, ch change) {
	c.qmu.Lock()
	c.changes = append(c.changes, ch)
	g.chg = int32(len(c.changes) - 1)
	c.qmu.Unlock()
	switch ch.what {
	case 'P', 's':
		c.segStmts[ch.name] = g.chg
	case 'B', 'p':
		c.segPortals[ch.name] = g.chg
	}
	c.push(g)
}

// maxOutstanding bounds the messages sent to the server whose replies are
// not all in. Past it the client's reader waits, as a client of the
// database itself would block on a full socket: without it a client that
// sends small messages (a Sync is 5 bytes) and reads no answer would grow
// the queue by a reply entry for each, about 20 times what it sent.
const maxOutstanding = 1 << 14

// room waits, before C2S handles a client message at maxOutstanding, until
// the queue is down to half that. It flushes first, so that the server has every
// message whose answer would make room.
func (c *session) room() error {
	c.qmu.Lock()
	full := c.qlen >= maxOutstanding
	c.qmu.Unlock()
	if !full {
		return nil
	}
	if err := c.sw.Flush(); err != nil {
		return err
	}
	c.qmu.Lock()
	defer c.qmu.Unlock()
	for c.qlen > maxOutstanding/2 && !c.dead { // half: not one wake-up per reply
		c.qcond.Wait()
	}
	if c.dead {
		return errClosed
	}
	return nil
}

// pop removes the queue's front; under qmu.
func (c *session) pop() {
	g := &c.q[c.qhead]
	if g.msg == 'S' || g.msg == 'Q' {
		c.syncs--
	}
	if g.mayCopy {
		c.copyOut--
		c.qcond.Broadcast() // copyGate
	}
	*g = reply{}
	c.qhead = (c.qhead + 1) % len(c.q)
	c.qlen--
	if c.qlen == maxOutstanding/2 {
		c.qcond.Broadcast() // room
	}
}

// front returns the queue's front, first dropping what the server skips
// after an error; under qmu.
func (c *session) front() *reply {
	for c.qlen > 0 {
		g := &c.q[c.qhead]
		if !c.discard || g.msg == 'S' {
			return g
		}
		// A skipped check, in its own messages or prefixed to a Query,
		// ran nothing: its admission ends (as in done).
		if g.adm != nil && (g.msg != 'Q' || !g.passed) {
			c.notRun = append(c.notRun, g.adm)
		}
		c.pop()
	}
	return nil
}

// toClient writes b, the server's message as read or fencegate's answer
// in its place, to the client, then the rest of a streamed message as it
// arrives, flushing unless more server messages are already read.
func (c *session) toClient(b []byte) error {
	if c.clientGone.Load() {
		return nil // a streamed rest is skipped by next
	}
	c.cwMu.Lock()
	defer c.cwMu.Unlock()
	if _, err := c.cw.Write(b); err != nil {
		return err
	}
	if c.sr.streamed() {
		if err := c.sr.copyBody(c.cw); err != nil {
			return err
		}
	}
	if !c.sr.buffered() {
		return c.cw.Flush()
	}
	return nil
}

// answer writes fencegate's own answer to the client and flushes.
func (c *session) answer(b []byte) error {
	c.cwMu.Lock()
	defer c.cwMu.Unlock()
	if _, err := c.cw.Write(b); err != nil {
		return err
	}
	return c.cw.Flush()
}

// serverLoop is S2C.
func (c *session) serverLoop() error {
	for {
		t, body, raw, err := c.sr.next()
		if err != nil {
			return err
		}
		switch t {
		case 'A', 'S', 'N': // notification, parameter status, notice: not replies
			if t == 'A' {
				c.ownNotification(body)
			}
			if t == 'S' {
				c.qmu.Lock()
				c.lexical.report(body)
				c.qmu.Unlock()
			}
			if err := c.toClient(raw); err != nil {
				return err
			}
			continue
		}
		out, err := c.reply(t, body, raw)
		if err != nil {
			c.tellClient(pgError{Severity: "FATAL", Code: "08P01", Message: "fencegate: " + strings.TrimPrefix(err.Error(), "pgwire: ")})
			return err
		}
		if t == 'Z' {
			if h := c.s.testHookAnswering; h != nil {
				h()
			}
		}
		// A streamed row or COPY data (c.sr.streamed) is the client's
		// (out is raw, its start) or of fencegate's own statements (nil:
		// the rest is skipped by next).
		if out != nil {
			if err := c.toClient(out); err != nil {
				return err
			}
		}
		// Shutting down: an idle session ends after this ReadyForQuery;
		// one in a transaction goes on until the transaction ends.
		if t == 'Z' && c.answered() {
			return errShutdown
		}
	}
}

// ownNotification gives a NotificationResponse that this session's own
// server connection sent the process id the client knows its connection
// by, fencegate's (BackendKeyData), in place: in a direct session the two
// are the same, and clients skip the notifications they sent themselves
// by comparing them. Other sessions' notifications keep their servers'
// process ids.
func (c *session) ownNotification(body []byte) {
	if c.serverPID != 0 && len(body) >= 4 && binary.BigEndian.Uint32(body) == c.serverPID {
		binary.BigEndian.PutUint32(body, c.cancelPID)
	}
}

// reply matches a server message with the queue and returns what the
// client is to see of it (nil: nothing).
func (c *session) reply(t byte, body, raw []byte) ([]byte, error) {
	var refused *proxy.Admission // its check failed: Done with refusal
	var refusal *tokens.RefusalError
	var passed, ended *proxy.Admission
	var notRun []*proxy.Admission
	out := raw

	c.qmu.Lock()
	// A panic below (a bug) must not leave qmu held: the session is then
	// closed (contain), which takes it.
	locked := true
	defer func() {
		if locked {
			c.qmu.Unlock()
		}
	}()
	if h := c.s.testHookReply; h != nil {
		h(t)
	}
	g := c.front()
	if g == nil {
		locked = false
		c.qmu.Unlock()
		return raw, nil // e.g. a FATAL error as the server shuts down
	}
	complete := false
	switch {
	case t == 'G' && g.mayCopy:
		c.copyIn = true
		c.qcond.Broadcast() // copyGate
	case t == 'G' || t == 'W':
		// Copy-in fencegate did not foresee (or copy-both): it cannot
		// tell which of the client's messages the server reads as COPY
		// data. Not expected; the session ends.
		locked = false
		c.qmu.Unlock()
		return nil, errUnforeseenCopy
	case c.copyIn && (t == 'C' || t == 'E'):
		c.copyIn = false // the COPY is over: done, or failed
	}
	if t == 'E' && c.failure == nil {
		if a := c.open.Load(); a != nil {
			c.failure = c.statementFailed(a, g, body)
		}
	}
	switch g.msg {
	case 'Q':
		if t == 'E' {
			g.failed = true
		}
		switch {
		case t == 'Z':
			complete = true
			if !g.failed {
				// What DEALLOCATE took is gone, whatever the block does.
				for i := range g.nchg {
					c.changes[g.chg+i].ok = true
				}
			}
			if g.synth != "" && !g.failed {
				out = appendCommandComplete(c.sout[:0], g.synth)
				out = append(out, raw...)
				c.sout = out
			}
		case g.own == ownRefusal:
			out = nil
			if t == 'E' {
				out = c.serr(g.why)
			}
		case g.setup > 0 && !g.passed:
			// The statements that set up the transaction, before the
			// check: theirs.
			switch t {
			case 'C':
				g.setup--
			case 'E':
				// The rest of the string, the check with it, did not run.
				c.notRun = append(c.notRun, g.adm)
				g.adm, g.passed = nil, true
			}
		case g.prefix > 0 && !g.passed:
			out = nil
			switch t {
			case 'C':
				g.passed = true
				passed = g.adm
			case 'E':
				refusal = c.checkRefusal(body, g.adm)
				refused = g.adm
				g.adm = nil
				out = c.serr(refusal)
			}
		case g.synth != "" && t != 'E':
			out = nil // answered at ReadyForQuery
		default:
			switch t {
			case 'E':
				if s := c.shiftPosition(body, g.at, g.prefix); s != nil {
					out = s
				}
			case 'C':
				c.countRows(g, body)
			}
		}
	case 'S':
		complete = t == 'Z'
	default:
		if t == 'E' {
			complete = true
			c.discard = true
			switch g.own {
			case ownCheck:
				refusal = c.checkRefusal(body, g.adm)
				refused = g.adm
				out = c.serr(refusal)
			case ownRefusal:
				out = c.serr(g.why)
			}
			break
		}
		switch g.msg {
		case 'P':
			complete = t == '1'
		case 'B':
			complete = t == '2'
		case 'C':
			complete = t == '3'
		case 'D':
			complete = t == 'T' || t == 'n'
		case 'E':
			complete = t == 'C' || t == 'I' || t == 's'
			if t == 'C' && g.own == ownClient {
				c.countRows(g, body)
			}
		}
		if g.own != ownClient {
			out = nil
			if complete && g.msg == 'E' && g.own == ownCheck {
				passed = g.adm
			}
		} else if complete && g.chg >= 0 {
			c.changes[g.chg].ok = true
		}
		// Ended as the server's tag says: a statement fencegate saw
		// parsed as COMMIT may since have been replaced by SQL (DEALLOCATE
		// and PREPARE) with one that ends nothing, and the block, whose
		// check locked the fence's row, must still end with its term.
		if complete && g.msg == 'E' && g.own == ownClient && g.kind == kindEnd && t == 'C' && endsTransaction(body) {
			ended = c.open.Swap(nil)
		}
	}
	if complete {
		if g.own == ownClient && c.s.gw != nil && g.text != "" {
			switch {
			case g.deferred:
				if c.s.gw.Audited() {
					c.setup.Add(g.text)
				}
			case c.audited():
				c.digest.Add(g.text)
			}
		}
		if t == 'Z' {
			c.status = body[0]
			if c.status == 'I' {
				c.setup.Reset()
				if a := c.open.Swap(nil); a != nil {
					ended = a
				}
			}
			c.discard = false
		}
		c.pop()
		if c.discard {
			// What the server skips to the next Sync goes now: a COPY
			// among it starts no copy-in, which copyGate may wait on.
			c.front()
		}
		if t == 'Z' {
			c.unsent = true // until answered
		}
	}
	var unended *proxy.Admission
	if passed != nil {
		unended = c.open.Swap(passed) // nil: a check starts each transaction once
	}
	notRun, c.notRun = c.notRun, nil
	locked = false
	c.qmu.Unlock()

	if refused != nil {
		refused.Done(refusal, "", 0)
	}
	for _, a := range notRun {
		a.Done(tokens.Refuse(tokens.ReasonStatementFailed, c.fence, a.Token(), "not run: an earlier message of the pipeline failed"), "", 0)
	}
	if ended != nil {
		c.finish(ended, c.outcome())
	}
	if passed != nil {
		passed.Checked()
		if unended != nil {
			c.finish(unended, c.outcome())
		}
		// The transaction's statements so far: those that set it up
		// before its check (pendingCheck).
		c.rows = 0
		c.resetSaves()
		c.lastEnd, c.failure = 0, nil
		c.digest, c.setup = c.setup, c.digest
		c.setup.Reset()
	}
	return out, nil
}

var (
	errShutdown       = errors.New("pgwire: shutting down")
	errUnforeseenCopy = errors.New("pgwire: the server started a COPY fencegate did not foresee")
)

func (c *session) audited() bool {
	a := c.open.Load()
	return a != nil && a.Audited()
}

// fingerprint is the audit fingerprint of the statements of a, the
// transaction that just ended (c.open no longer holds it).
func (c *session) fingerprint(a *proxy.Admission) string {
	if !a.Audited() {
		return ""
	}
	return c.digest.Sum()
}

// Values of session.lastEnd: the tag of a statement that ends a
// transaction, COMMIT or another (ROLLBACK, which PostgreSQL also answers
// to the COMMIT of a failed block and to ROLLBACK TO SAVEPOINT, PREPARE
// TRANSACTION, COMMIT or ROLLBACK PREPARED).
const (
	endCommit = 'C'
	endOther  = 'R'
)

// outcome is what became of the open transaction whose end the server just
// answered, as finish is to be told: nil when it committed, that is when
// the last statement that ended a transaction was a COMMIT, or when none
// did and no error came since its check passed (an implicit transaction,
// which ReadyForQuery 'I' ends); else its first error (STATEMENT_FAILED),
// or withdrawn, its rollback by the client.
func (c *session) outcome() *tokens.RefusalError {
	switch {
	case c.lastEnd == endCommit:
		return nil
	case c.failure != nil:
		return c.failure
	case c.lastEnd == endOther:
		return withdrawn
	}
	return nil
}

// finish calls a.Done with r, the outcome of the transaction that just
// ended: the rows its statements changed count only where they may be in
// the database (it committed, or its outcome is unknown).
func (c *session) finish(a *proxy.Admission, r *tokens.RefusalError) {
	if r == withdrawn {
		a.RolledBack(c.fingerprint(a))
		return
	}
	if r == nil {
		a.Done(nil, c.fingerprint(a), c.rows)
		return
	}
	rows := c.rows
	if r.Metadata["outcome"] != "unknown" {
		rows = 0
	}
	a.Done(r, c.fingerprint(a), rows)
}

// withdrawn stands, where an outcome is a refusal, for a transaction its
// client rolled back, or left, without an error: nothing of it was applied
// and nothing refused it (Admission.RolledBack). A connection pool's
// ROLLBACK on every connection it takes back is one.
var withdrawn = &tokens.RefusalError{Reason: tokens.ReasonStatementFailed, Msg: "withdrawn by the client"}

// statementFailed is the STATEMENT_FAILED outcome of a, the open
// transaction, failed by an ErrorResponse (body) to g: the server's error
// with its SQLSTATE, or, for a statement fencegate refused in it
// (ownRefusal), that refusal.
func (c *session) statementFailed(a *proxy.Admission, g *reply, body []byte) *tokens.RefusalError {
	if g.own == ownRefusal && g.why != nil {
		r := tokens.Refuse(tokens.ReasonStatementFailed, c.fence, a.Token(), "%s", clipText(refusalPgError(g.why).Message))
		r.Metadata = map[string]string{"sqlstate": sqlState(g.why)}
		return r
	}
	code, _ := errorField(body, 'C')
	msg, _ := errorField(body, 'M')
	r := tokens.Refuse(tokens.ReasonStatementFailed, c.fence, a.Token(), "%s", clipText(msg))
	r.Metadata = map[string]string{"sqlstate": clipText(code)}
	return r
}

// maxErrorText bounds the server's text kept in an outcome (it is
// logged): a client's RAISE may be as long as a message may.
const maxErrorText = 1 << 10

// clipText cuts s to maxErrorText bytes, at a rune boundary.
func clipText(s string) string {
	if len(s) <= maxErrorText {
		return s
	}
	cut := maxErrorText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// checkRefusal is the refusal of a fence check the server failed.
func (c *session) checkRefusal(body []byte, adm *proxy.Admission) *tokens.RefusalError {
	var er pgproto3.ErrorResponse
	if err := er.Decode(body); err != nil {
		return tokens.Refuse(tokens.ReasonBackendUnavailable, c.fence, adm.Token(), "cannot read the fence check's answer: %v", err)
	}
	return postgres.RefusalOf(c.fence, adm.Token(), pgconn.ErrorResponseToPgError(&er))
}

// sqlState is API.md's SQLSTATE of a refusal.
func sqlState(r *tokens.RefusalError) string {
	switch r.Reason {
	case tokens.ReasonStaleToken:
		return "FG001"
	case tokens.ReasonTermEnded:
		return "FG002"
	case tokens.ReasonUnknownTerm:
		return "FG003"
	case tokens.ReasonMissingToken, tokens.ReasonInvalidToken:
		return "FG004"
	case tokens.ReasonEtcdUnavailable:
		return "FG005"
	case tokens.ReasonInvalidRequest:
		return "FG006"
	case tokens.ReasonNotAuthorized:
		return "42501"
	case tokens.ReasonUnauthenticated:
		return "28000"
	case tokens.ReasonOverloaded:
		return "53000"
	}
	if s := r.Metadata["sqlstate"]; s != "" {
		return s
	}
	return "58000"
}

// serr is refusalError in S2C's buffer.
func (c *session) serr(r *tokens.RefusalError) []byte {
	b := refusalError(c.sout[:0], r)
	c.sout = keepBuf(b)
	return b
}

// refusalError appends the ErrorResponse of a refusal to dst.
func refusalError(dst []byte, r *tokens.RefusalError) []byte {
	return appendError(dst, refusalPgError(r))
}

// refusalPgError is the error a client gets for a refusal.
func refusalPgError(r *tokens.RefusalError) pgError {
	msg := "fencegate: " + string(r.Reason)
	if r.Msg != "" {
		msg += ": " + r.Msg
	}
	e := pgError{Severity: "ERROR", Code: sqlState(r), Message: msg}
	if r.HighWater != 0 {
		e.Detail = "high_water=" + r.HighWater.String()
	}
	switch {
	case r.Reason == tokens.ReasonStaleToken && r.Token < r.HighWater:
		e.Hint = "a later leader has written to this fence; this writer must step down"
	case r.Reason == tokens.ReasonStaleToken:
		e.Hint = "a later leader holds this fence's election; this writer must step down"
	case r.Reason == tokens.ReasonTermEnded:
		e.Hint = "this writer's term is over; it must step down"
	}
	return e
}

// shiftPosition rewrites an ErrorResponse's position (P) to count from
// the client's SQL rather than from the fence check inserted into it,
// prefix characters at character at; nil when there is nothing to
// rewrite.
func (c *session) shiftPosition(body []byte, at, prefix int) []byte {
	p, ok := errorField(body, 'P')
	if !ok {
		return nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= at+prefix {
		return nil
	}
	b, sp := beginMsg(c.sout[:0], 'E')
	for len(body) > 0 && body[0] != 0 {
		code := body[0]
		v, rest, _ := cstring(body[1:])
		b = append(b, code)
		if code == 'P' {
			b = strconv.AppendInt(b, int64(n-prefix), 10)
			b = append(b, 0)
		} else {
			b = append(append(b, v...), 0)
		}
		body = rest
	}
	b = finishMsg(append(b, 0), sp)
	c.sout = keepBuf(b)
	return b
}

// endsTransaction says a CommandComplete body's tag is that of a
// statement that ends the transaction (kindEnd's).
func endsTransaction(body []byte) bool {
	tag, _, _ := cstring(body)
	return endOf(tag) != 0
}

// endOf is endCommit or endOther for the tag of a statement that ends the
// transaction, else 0.
func endOf(tag []byte) byte {
	switch string(tag) {
	case "COMMIT":
		return endCommit
	case "ROLLBACK", "PREPARE TRANSACTION", "COMMIT PREPARED", "ROLLBACK PREPARED":
		return endOther
	}
	return 0
}

// countRows adds the rows a CommandComplete (body) of the client's, an
// answer to g, says were written, and notes a tag that ends a transaction
// (lastEnd). Only a tag of a statement that writes counts: INSERT, UPDATE,
// DELETE, MERGE, and COPY when it was a COPY FROM (a COPY TO answers the
// rows it read; MOVE and FETCH, the rows they skipped or read). Rows a
// ROLLBACK TO SAVEPOINT undid are taken off again: the count as the
// savepoint was set is restored. The statement a COPY, SAVEPOINT, RELEASE
// or ROLLBACK TO tag answers is the next of g's statements' rows (the
// tags come in the order of the statements, and none of these kinds runs
// but as a client's statement of its own); a "ROLLBACK" that is not the
// next is a ROLLBACK that ends the transaction (or a COMMIT of a failed
// one), its last statement.
func (c *session) countRows(g *reply, body []byte) {
	tag, _, _ := cstring(body)
	if e := endOf(tag); e != 0 {
		c.lastEnd = e
	}
	word := tag
	if i := bytes.IndexByte(tag, ' '); i >= 0 {
		word = tag[:i]
	}
	var op rowsOp
	if g.vd != nil && g.op < len(g.vd.rows) {
		op = g.vd.rows[g.op]
	}
	switch string(word) {
	case "INSERT", "UPDATE", "DELETE", "MERGE":
		c.rows += tagCount(tag)
		return
	case "COPY":
		if op.kind != opCopyFrom && op.kind != opCopyTo {
			return
		}
		if op.kind == opCopyFrom {
			c.rows += tagCount(tag)
		}
	case "SAVEPOINT":
		if op.kind != opSavepoint {
			return
		}
		if len(c.saves) == maxSaves {
			if !c.savesLost {
				c.savesLost, c.savesFloor = true, c.saves[0].rows
			}
			n := copy(c.saves, c.saves[maxSaves/2:])
			clear(c.saves[n:])
			c.saves = c.saves[:n]
		}
		c.saves = append(c.saves, savepoint{name: op.name, rows: c.rows})
	case "RELEASE":
		if op.kind != opRelease {
			return
		}
		i := c.savepoint(op.name)
		if i < 0 && c.savesLost {
			i = 0 // one let go: every one kept is after it
		}
		if i >= 0 {
			clear(c.saves[i:])
			c.saves = c.saves[:i]
		}
	case "ROLLBACK":
		if op.kind != opRollbackTo {
			return
		}
		if i := c.savepoint(op.name); i >= 0 {
			c.rows = c.saves[i].rows
			clear(c.saves[i+1:])
			c.saves = c.saves[:i+1]
		} else if c.savesLost {
			c.rows = c.savesFloor
			clear(c.saves)
			c.saves = c.saves[:0]
		}
	default:
		return
	}
	g.op++
}

// maxSaves is how many of a transaction's savepoints countRows keeps.
const maxSaves = 1024

// resetSaves forgets the savepoints of a transaction that ended.
func (c *session) resetSaves() {
	clear(c.saves)
	c.saves = c.saves[:0]
	c.savesLost, c.savesFloor = false, 0
}

// savepoint is a savepoint of the open transaction, and the rows its
// statements had changed as it was set.
type savepoint struct {
	name string
	rows int64
}

// savepoint is the index in saves of the latest savepoint named name, as
// PostgreSQL finds it, or -1.
func (c *session) savepoint(name string) int {
	for i := len(c.saves) - 1; i >= 0; i-- {
		if c.saves[i].name == name {
			return i
		}
	}
	return -1
}

// tagCount is the row count a command tag ends with, 0 if none.
func tagCount(tag []byte) int64 {
	var n int64
	i := len(tag)
	for i > 0 && tag[i-1] >= '0' && tag[i-1] <= '9' {
		i--
	}
	if i == 0 || tag[i-1] != ' ' || len(tag)-i > 18 {
		return 0
	}
	for _, d := range tag[i:] {
		n = n*10 + int64(d-'0')
	}
	return n
}
