package pgwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/fencegate/fencegate/api/internal/listen"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/tokens"
)

var errClosed = errors.New("pgwire: session closed")

const (
	whyProcExtended   = "CALL and DO in the extended protocol may COMMIT and run the rest without the fence check; send them as a simple query"
	whyExecuteEnd     = "EXECUTE of a prepared statement that ends the transaction or is CALL or DO"
	whyFunctionCall   = "the fast-path function call interface is not fenced"
	whySetTokenTx     = "SET fencegate.token only outside a transaction block, as a query of its own"
	whySetTokenExt    = "SET fencegate.token in the extended protocol only alone between Syncs, outside a transaction block, with the unnamed portal"
	whyShowExt        = "SHOW fencegate.token or fencegate.fence in the extended protocol only alone between Syncs, with the unnamed portal"
	whyChanges        = "more than 262144 Parse, Bind and Close messages without a Sync"
	whyLocalName      = "SET fencegate.token and SHOW fencegate.* take no name of a prepared statement the database holds; close it first"
	whyProcInBatch    = "CALL and DO in a simple Query sent before the Sync of extended-protocol messages may COMMIT and run the rest without the fence check; send them after the Sync"
	whyNameASCII      = "prepared statement and portal names must be ASCII: the server converts others from client_encoding before comparing them"
	whyBackslashBatch = "a simple Query with a backslash sent before the Sync of extended-protocol messages: fencegate cannot know how the database reads it (standard_conforming_strings and client_encoding may have changed since the last ReadyForQuery); send it after the Sync, or pass values as parameters"
)

// maxChanges bounds the statements and portals one segment (the messages
// up to a Sync) makes or closes: fencegate keeps each until the Sync.
const maxChanges = 1 << 18

// clientLoop is C2S: it reads the client's messages and forwards them,
// inserting the fence check at the start of every transaction.
func (c *session) clientLoop() error {
	for {
		if !c.cr.buffered() {
			if err := c.sw.Flush(); err != nil {
				return err
			}
		}
		t, body, raw, err := c.cr.next()
		if err != nil {
			var tl *tooLong
			if errors.As(err, &tl) {
				// The answers to what came before go first, as
				// PostgreSQL gives them before it reads this message.
				if c.sw.Flush() == nil {
					c.waitAnsweredFor(tooLongWait)
				}
				c.tellFatal(c.refusalOf(tl.Error()))
				listen.Linger(c.client, c.cr.r, int64(tl.n), listen.LingerTime)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return c.leave()
			}
			return err
		}
		if !c.certValid() {
			return errClosed // the message is not sent on
		}
		if a := c.open.Load(); a != nil {
			// A pointer compare unless the policy was reloaded. The sweep
			// ends an idle transaction; this, one whose client goes on
			// before the sweep comes, or after it ended one with messages
			// in flight (killed): nothing more reaches the server.
			if why := a.Revoked(); why != nil && (c.endTransaction(a, why) || c.killed.Load() != nil) {
				return errClosed // the message is not sent on
			}
		}
		if err := c.room(); err != nil {
			return err
		}
		if c.copies && t != 'd' && t != 'H' && t != 'X' {
			drop, err := c.copyGate(t)
			if err != nil {
				return err
			}
			if drop {
				continue
			}
		}
		if c.localVd != nil && (t == 'Q' || t == 'F') {
			// A Query before the Sync of a segment fencegate answers
			// itself: its answers so far go first, in order, and the
			// segment ends unsynced, so a SET in it changes nothing.
			c.localVd = nil
			if err := c.writeLocal(); err != nil {
				return err
			}
		}
		switch t {
		case 'X':
			return c.leave()
		case 'Q':
			err = c.query(body, raw)
		case 'P', 'B', 'E', 'D', 'C', 'H', 'S':
			err = c.extended(t, body, raw)
		case 'd', 'c', 'f': // COPY data: part of a statement already fenced
			if !c.swallow {
				_, err = c.sw.Write(raw)
				if err == nil && c.cr.streamed() {
					err = c.cr.copyBody(c.sw) // else skipped by next
				}
			}
		case 'F':
			err = c.functionCall()
		default:
			return fmt.Errorf("pgwire: unexpected message %q from the client", t)
		}
		if err != nil {
			return err
		}
	}
}

// errClientLeft ends C2S when the client has left (Terminate, or the end
// of its connection): run lets the server end the session (leave).
var errClientLeft = errors.New("pgwire: the client left")

// leave is the client leaving: what it sent before (a COMMIT, a COPY's
// data) goes to the server, then a Terminate (the client's, or in place
// of the end of its connection), so that the server runs it and ends the
// session, as it would with the client's own connection. fencegate stops
// writing the client, and S2C reads the server to the end: closing with
// its answers unread could reset the connection and lose what the server
// had yet to read.
func (c *session) leave() error {
	c.clientGone.Store(true)
	if _, err := c.sw.Write(terminateMsg); err != nil {
		return err
	}
	if err := c.sw.Flush(); err != nil {
		return err
	}
	if cw, ok := c.server.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	return errClientLeft
}

// terminateMsg is a Terminate.
var terminateMsg = []byte{'X', 0, 0, 0, 4}

// copyGate keeps fencegate's view of the session in step with the
// server's across COPY FROM STDIN. In copy-in the server reads every
// message as part of the COPY: it ignores a Sync (libpq sends one after
// the Execute of a COPY, before the data) and fails the COPY on a
// message other than CopyData, CopyDone, CopyFail or Flush, which it
// does not run. fencegate never lets the server decide which it read in
// copy-in and which after: a Sync or other message that follows a COPY
// not yet answered waits until the server has either started copy-in or
// finished the COPY (a Flush of fencegate's own gets its answers sent).
// In copy-in a Sync is dropped, as the server would, and any other
// message but the COPY's own ends the session (08P01); a COPY ended by
// the server (an error, a statement_timeout) is over for fencegate too,
// before its client reads why. Only C2S, which copyGate is part of,
// pushes mayCopy entries; drop says t is not sent.
func (c *session) copyGate(t byte) (drop bool, err error) {
	c.qmu.Lock()
	if c.copyOut > 0 && !c.copyIn && !c.dead {
		c.qmu.Unlock()
		if _, err := c.sw.Write(flushMsg); err != nil {
			return false, err
		}
		if err := c.sw.Flush(); err != nil {
			return false, err
		}
		c.qmu.Lock()
		for c.copyOut > 0 && !c.copyIn && !c.dead {
			c.qcond.Wait()
		}
	}
	in, dead := c.copyIn, c.dead
	if t == 'c' || t == 'f' {
		c.copyIn = false
	}
	if !in && c.copyOut == 0 {
		c.copies = false
	}
	c.qmu.Unlock()
	switch {
	case dead:
		return false, errClosed
	case !in || t == 'c' || t == 'f':
		return false, nil
	case t == 'S':
		return true, nil
	}
	c.tellClient(pgError{Severity: "FATAL", Code: "08P01", Message: fmt.Sprintf("fencegate: unexpected message type 0x%02X during COPY from stdin: end the COPY with CopyDone or CopyFail first", t)})
	return false, fmt.Errorf("pgwire: message %q from the client in copy-in", t)
}

// flushMsg is a Flush: the server sends what it holds, and answers nothing.
var flushMsg = []byte{'H', 0, 0, 0, 4}

// refusalOf is the refusal of something the client sent that fencegate
// will not pass (FG006), counted, logged and audited as the other ways in
// count theirs (proxy.Gateway.RefuseRequest): unless the caller is no
// longer allowed to write the fence, which it is then told.
func (c *session) refusalOf(why string) *tokens.RefusalError {
	r := tokens.Refuse(tokens.ReasonInvalidRequest, c.fence, 0, "%s", why)
	if c.s.gw == nil {
		return r
	}
	if rr, ok := tokens.AsRefusal(c.s.gw.RefuseRequest(c.ctx, policy.ActionSQLWrite, c.fence, c.token, r)); ok {
		return rr
	}
	return r
}

// startSegment waits, at the start of a segment, until every earlier one
// is answered and its answer written (waitAnswered), and learns the
// transaction status the segment starts in.
func (c *session) startSegment() error {
	if err := c.sw.Flush(); err != nil {
		return err
	}
	c.qmu.Lock()
	c.waitAnswered()
	status, dead := c.status, c.dead
	c.segLexical = c.lexical.why()
	// What the server confirmed of the last segment now holds; the slice
	// is reused.
	for i := range c.changes {
		ch := &c.changes[i]
		if !ch.ok {
			continue
		}
		switch ch.what {
		case 'P':
			c.stmts[ch.name] = ch.vd
		case 's':
			delete(c.stmts, ch.name)
		case 'B':
			c.portals[ch.name] = ch.vd
		case 'p':
			delete(c.portals, ch.name)
		case 'S':
			clear(c.stmts)
		}
	}
	if cap(c.changes) > 4096 { // a one-off: do not keep it
		c.changes = nil
		c.segStmts, c.segPortals = map[string]int32{}, map[string]int32{}
	} else {
		clear(c.changes)
		c.changes = c.changes[:0]
		clear(c.segStmts)
		clear(c.segPortals)
	}
	c.qmu.Unlock()
	if dead {
		return errClosed
	}
	if status == 'I' && len(c.portals) > 0 {
		clear(c.portals) // portals end with their transaction
	}
	c.segStart = false
	c.segStatus = status
	if status == 'I' {
		c.pendingCheck, c.deferrals = false, 0
	}
	c.needCheck = status == 'I' || status == 'T' && c.pendingCheck
	c.fresh = true
	return nil
}

// idleStart says the segment started outside a transaction and nothing
// of it is sent yet.
func (c *session) idleStart() bool { return c.fresh && c.segStatus == 'I' }

// maxDeferrals bounds the statements that set up one transaction and
// run before its check (pendingCheck); past it they get the check in
// front, as any statement, and fencegate holds nothing more for them.
const maxDeferrals = 16

// deferCheck records a statement that sets up the transaction run without
// the check, and says whether one more may.
func (c *session) deferCheck() bool {
	if c.deferrals >= maxDeferrals {
		return false
	}
	c.deferrals++
	c.pendingCheck = true
	return true
}

// checked records that the check is sent in front of the transaction's
// next statement.
func (c *session) checked() {
	c.needCheck, c.pendingCheck, c.deferrals = false, false, 0
}

// localHere says fencegate may answer vd, a SET fencegate.token or SHOW
// fencegate.* of the extended protocol, itself from here (localSegment):
// nothing of the segment is sent yet, and it is outside a transaction
// block, or a SHOW in a block that has not failed.
func (c *session) localHere(vd *verdict) bool {
	return c.fresh && (c.segStatus == 'I' || vd.kind == kindShow && c.segStatus == 'T')
}

// aborted says vd, a statement fencegate answers, comes first in a
// segment that starts in a failed block, where PostgreSQL refuses every
// statement but those that end the block (25P02): SHOW fencegate.*, which
// has no other reason to fail there. (A SET of the token is refused
// anywhere in a block, whySetTokenExt.)
func (c *session) aborted(vd *verdict) bool {
	return vd.kind == kindShow && c.fresh && c.segStatus == 'E'
}

// abortedSegment fails the segment as the server fails a statement in a
// failed block: a Parse of a SHOW, which the server refuses (25P02)
// without making the statement, and whose error passes on.
func (c *session) abortedSegment() error {
	return c.failSegment("SHOW fencegate.token", reply{msg: 'P', own: ownAborted, chg: -1})
}

// serverHolds says the server holds a prepared statement the client
// made with Parse under name (fencegate's own answered ones aside).
func (c *session) serverHolds(name []byte) bool {
	vd := c.lookup('P', 's', name)
	return vd != nil && !vd.local()
}

// nameKey is the name of a prepared statement or portal as PostgreSQL
// tells them apart: its first maxNameLen bytes, cut byte-wise (its hash
// tables are keyed by NAMEDATALEN bytes, copied with strlcpy), so that
// two names that differ only past them are one. Every name a client's
// message gives is keyed so before fencegate stores, looks up or compares
// it. A short name is returned as it is, not copied.
func nameKey(name []byte) []byte {
	if len(name) > maxNameLen {
		return name[:maxNameLen]
	}
	return name
}

// asciiName says name, of a prepared statement or portal, is ASCII.
// PostgreSQL converts a name (in a message, or in SQL's text) from
// client_encoding to the server's encoding before it cuts it to
// maxNameLen bytes and compares it; fencegate sees the client's bytes,
// and its parser cuts SQL identifiers as UTF8. Names of other bytes that
// fencegate keeps apart can be one to the server, or the other way round;
// drivers name their statements in ASCII, which every encoding keeps.
func asciiName[T string | []byte](name T) bool {
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x80 {
			return false
		}
	}
	return true
}

// lookup is what the client's statement (what 'P') or portal ('B') name
// refers to now: this segment's latest Parse or Bind, or Close
// (closeWhat), of it, else what the server confirmed. nil is a statement
// fencegate did not see made: SQL PREPARE's, which holds a query (SELECT,
// INSERT, UPDATE, DELETE, MERGE or VALUES).
func (c *session) lookup(what, closeWhat byte, name []byte) *verdict {
	name = nameKey(name)
	latest, done := c.segStmts, c.stmts
	if what == 'B' {
		latest, done = c.segPortals, c.portals
	}
	if i, ok := latest[string(name)]; ok { // no allocation for the look-up
		c.qmu.Lock()
		ch := c.changes[i]
		c.qmu.Unlock()
		if ch.what == closeWhat {
			return nil
		}
		return ch.vd
	}
	return done[string(name)]
}

// query handles a simple Query.
func (c *session) query(body, raw []byte) error {
	sql, _, ok := cstring(body)
	if !ok {
		return errors.New("pgwire: Query without NUL")
	}
	if c.swallow {
		// The server skips it too, to the Sync: it ends nothing, and
		// the segment goes on (what it sent is still to be answered).
		return nil
	}
	atStart := c.segStart
	if atStart {
		if err := c.startSegment(); err != nil {
			return err
		}
	}
	c.segStart = true // a Query ends the segment
	idle := atStart && c.idleStart()
	vd := c.s.stmts.get(sql)
	// First: where the database may read the text otherwise, fencegate's
	// own reading (a parse error, say) is beside the point.
	why := c.lexicalRefusal(sql, atStart, vd)
	if why == "" {
		why = vd.refuse
	}
	if why == "" && vd.kind == kindSetToken && !idle {
		why = whySetTokenTx
	}
	if why == "" {
		why = c.executesEnd(vd)
	}
	if why != "" {
		r := c.refusalOf(why)
		if idle {
			return c.answer(appendReadyForQuery(c.cerr(r), 'I'))
		}
		return c.refuseQuery(r, raw)
	}
	if vd.kind == kindShow {
		if !atStart {
			return c.refuseQuery(c.refusalOf(whyShow), raw)
		}
		if c.segStatus == 'E' {
			// A failed block: the server refuses the SHOW before running
			// it (25P02), as it refuses all but the statements that end
			// the block. Its answer, not fencegate's.
			c.push(reply{msg: 'Q', chg: -1, text: vd.text})
			_, err := c.sw.Write(raw)
			return err
		}
		return c.answer(appendReadyForQuery(appendShow(c.out[:0], vd.token, c.setting(vd.token)), c.segStatus))
	}
	if vd.kind == kindSetToken {
		if _, err := tokens.Parse(vd.token); err != nil {
			r := tokens.Refuse(tokens.ReasonInvalidToken, c.fence, 0, "fencing token %.32q is not a decimal integer in [1, 2^64)", vd.token)
			return c.answer(appendReadyForQuery(c.cerr(r), 'I'))
		}
		c.token = vd.token
		return c.answer(appendReadyForQuery(appendCommandComplete(c.out[:0], "SET"), 'I'))
	}
	// BEGIN [ISOLATION LEVEL …], SET TRANSACTION …: the check goes in
	// front of the transaction's first other statement, in a later
	// Query if this one opens a block (a SET TRANSACTION may follow a
	// plain BEGIN).
	deferred := vd.kind == kindSetup && c.needCheck && c.deferCheck()
	if vd.kind == kindEmpty || deferred || !c.needCheck {
		c.pushQuery(reply{msg: 'Q', chg: -1, text: vd.text, deferred: deferred, mayCopy: vd.copyFrom, vd: vd})
		_, err := c.sw.Write(raw)
		return err
	}
	adm, err := c.s.gw.AdmitSQL(c.ctx, c.fence, c.token)
	if err != nil {
		r, _ := tokens.AsRefusal(err)
		if r == nil {
			r = tokens.Refuse(tokens.ReasonBackendUnavailable, c.fence, 0, "%v", err)
		}
		if idle {
			return c.answer(appendReadyForQuery(c.cerr(r), 'I'))
		}
		return c.refuseQuery(r, raw)
	}
	c.checked()
	// One Query: PostgreSQL runs a string of several statements as one
	// transaction (a BEGIN in it makes that same transaction a block), so
	// the check is the first statement of the client's transaction, after
	// those that set it up (BEGIN ISOLATION LEVEL …, SET TRANSACTION …).
	b, sp := beginMsg(c.out[:0], 'Q')
	b = append(b, sql[:vd.setupEnd]...)
	start := len(b)
	b = append(b, "SELECT fencegate.advance_session('"...)
	b = append(b, c.fence...) // [A-Za-z0-9._-]: nothing to quote
	b = append(b, "'::pg_catalog.text, "...)
	b = strconv.AppendUint(b, uint64(adm.Token()), 10)
	b = append(b, "::pg_catalog.int8);"...)
	g := reply{msg: 'Q', prefix: len(b) - start, adm: adm, chg: -1, text: vd.text, mayCopy: vd.copyFrom, vd: vd}
	if vd.setup > 0 {
		g.setup, g.at = vd.setup, vd.setupAt
	}
	if vd.kind == kindDiscardAll && idle {
		// PostgreSQL runs DISCARD ALL only outside a transaction, where
		// no check can run; what it is made of runs inside one, fenced,
		// and the client sees DISCARD ALL's answer.
		b = append(b, discardAllSQL...)
		g.synth = "DISCARD ALL"
	} else {
		b = append(b, sql[vd.setupEnd:]...)
	}
	b = finishMsg(append(b, 0), sp)
	c.out = keepBuf(b)
	c.pushQuery(g)
	if _, err := c.sw.Write(b); err != nil {
		adm.Done(tokens.Refuse(tokens.ReasonBackendUnavailable, c.fence, adm.Token(), "lost the database: %v", err), "", 0)
		return err
	}
	return nil
}

// discardAllSQL is what DISCARD ALL does, in PostgreSQL's documented
// order, as statements that run inside a transaction.
const discardAllSQL = "CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; DEALLOCATE ALL; UNLISTEN *; " +
	"SELECT pg_catalog.pg_advisory_unlock_all(); DISCARD PLANS; DISCARD TEMP; DISCARD SEQUENCES"

// lexicalRefusal says why a Query the check would not go in front of, or
// whose text the server may read otherwise than fencegate, cannot be
// sent, or "".
//
// fencegate reads SQL as PostgreSQL does with standard_conforming_strings
// on and an ASCII-safe client_encoding. The two readings of a text differ
// only at a backslash byte: with standard_conforming_strings off it
// escapes a quote in any string, and in the client-only encodings (SJIS,
// BIG5, GBK, ...) it can be the second byte of a character, so the quote
// after it ends an escape string (E'…'). A COMMIT fencegate reads inside a string
// would run on the server, and what follows it outside the fenced
// transaction. Such a text is refused while the session's settings (as
// the server last reported them, which fencegate has seen at the start of
// a segment) allow the other reading; a text without a backslash reads
// the same either way.
//
// A Query sent before the Sync of extended-protocol messages runs in
// their implicit transaction, which is not a block: a lone DO or CALL in
// it may COMMIT, and settings may have changed since the last report.
func (c *session) lexicalRefusal(sql []byte, atStart bool, vd *verdict) string {
	if atStart {
		if c.segLexical != "" && bytes.IndexByte(sql, '\\') >= 0 {
			return c.segLexical
		}
		return ""
	}
	if vd.hasProc && !c.needCheck {
		return whyProcInBatch
	}
	if bytes.IndexByte(sql, '\\') >= 0 {
		return whyBackslashBatch
	}
	return ""
}

// functionCall refuses a FunctionCall, in its place a Query the server
// fails. The server answers either with ReadyForQuery, ending the
// implicit transaction of the messages before it, so like a Query it ends
// the segment: what follows starts a new one, fenced anew.
func (c *session) functionCall() error {
	if c.swallow {
		return nil // skipped by the server too, as a Query (query)
	}
	if c.segStart {
		if err := c.startSegment(); err != nil {
			return err
		}
	}
	c.segStart = true
	return c.refuseQuery(c.refusalOf(whyFunctionCall), nil)
}

// refuseQuery replaces a refused Query (or FunctionCall) with one the
// server fails, so the transaction fails as the client expects, and the
// error is rewritten to r.
func (c *session) refuseQuery(r *tokens.RefusalError, _ []byte) error {
	c.out = appendQuery(c.out[:0], []byte("fencegate refused"))
	c.push(reply{msg: 'Q', own: ownRefusal, why: r, chg: -1})
	_, err := c.sw.Write(c.out)
	return err
}

// extended handles a message of the extended protocol.
func (c *session) extended(t byte, body, raw []byte) error {
	if c.localVd != nil {
		return c.localSegment(t, body)
	}
	if c.swallow {
		if t != 'S' {
			return nil
		}
		c.swallow, c.segStart = false, true
		if c.localRFQ {
			c.localRFQ = false
			return c.answer(appendReadyForQuery(c.out[:0], 'I'))
		}
		c.push(reply{msg: 'S', chg: -1})
		_, err := c.sw.Write(raw)
		return err
	}
	switch t {
	case 'H':
		if _, err := c.sw.Write(raw); err != nil {
			return err
		}
		return c.sw.Flush()
	case 'S':
		c.segStart = true
		c.push(reply{msg: 'S', chg: -1})
		_, err := c.sw.Write(raw)
		return err
	}
	if c.segStart {
		if err := c.startSegment(); err != nil {
			return err
		}
	}
	if len(c.changes) >= maxChanges && (t == 'P' || t == 'B' || t == 'C' || t == 'E') {
		return c.refuseSegment(c.refusalOf(whyChanges))
	}
	g := reply{msg: t, chg: -1}
	var ch *change
	var vd *verdict
	var stmt []byte // the statement a Bind or Describe names
	why := ""
	switch t {
	case 'P':
		name, rest, ok1 := cstring(body)
		query, _, ok2 := cstring(rest)
		if !ok1 || !ok2 {
			return errors.New("pgwire: bad Parse message")
		}
		ascii := asciiName(name)
		name = nameKey(name)
		vd = c.s.stmts.get(query)
		switch {
		case !ascii:
			why = whyNameASCII
		case vd.refuse != "":
			why = vd.refuse
		case vd.hasProc:
			why = whyProcExtended
		case reservedName(string(name)):
			why = whyName
		case c.aborted(vd):
			return c.abortedSegment()
		case vd.local() && len(name) != 0 && c.serverHolds(name):
			// fencegate would judge SQL EXECUTE of the name by its own
			// statement while the server ran its own (a COMMIT, say).
			why = whyLocalName
		case vd.local() && c.localHere(vd):
			// Answered by fencegate, nothing sent: localSegment. The
			// statement is fencegate's until the next Parse or Close of
			// its name: a Bind of it must not reach the server, which
			// has an older one of that name (the unnamed) or none.
			c.stmts[string(name)] = vd
			c.startLocal(vd, string(name))
			c.local = appendParseComplete(c.local)
			return nil
		case vd.local():
			why = vd.whyLocal()
		}
		ch = &change{what: 'P', name: string(name), vd: vd}
	case 'B':
		portal, rest, ok1 := cstring(body)
		var ok2 bool
		stmt, _, ok2 = cstring(rest)
		if !ok1 || !ok2 {
			return errors.New("pgwire: bad Bind message")
		}
		if !asciiName(portal) || !asciiName(stmt) {
			why = whyNameASCII
			break
		}
		portal, stmt = nameKey(portal), nameKey(stmt)
		vd = c.lookup('P', 's', stmt)
		if vd != nil && vd.local() {
			if c.aborted(vd) {
				return c.abortedSegment()
			}
			if len(portal) == 0 && c.localHere(vd) {
				c.startLocal(vd, string(stmt))
				return c.localSegment(t, body)
			}
			why = vd.whyLocal()
			break
		}
		ch = &change{what: 'B', name: string(portal), vd: vd}
	case 'D':
		if len(body) < 2 {
			return errors.New("pgwire: bad Describe message")
		}
		name, _, ok := cstring(body[1:])
		if !asciiName(name) {
			why = whyNameASCII
			break
		}
		if body[0] != 'S' {
			break
		}
		if !ok {
			return errors.New("pgwire: bad Describe message")
		}
		stmt = nameKey(name)
		vd = c.lookup('P', 's', stmt)
		if vd != nil && vd.local() {
			if c.aborted(vd) {
				return c.abortedSegment()
			}
			if c.localHere(vd) {
				c.startLocal(vd, string(stmt))
				return c.localSegment(t, body)
			}
			why = vd.whyLocal()
		}
	case 'E':
		portal, _, ok := cstring(body)
		if !ok {
			return errors.New("pgwire: bad Execute message")
		}
		if !asciiName(portal) {
			why = whyNameASCII
			break
		}
		vd = c.lookup('B', 'p', portal)
		if vd != nil {
			g.kind, g.text, g.mayCopy, g.vd = vd.kind, vd.text, vd.copyFrom, vd
			// Checked now, in message order: what the names refer to
			// when the server runs this Execute.
			why = c.executesEnd(vd)
			// SQL DEALLOCATE (psycopg's pipeline mode sends it so): the
			// statement is gone once this Execute completes, a change
			// in order with the segment's Parses and Closes. A name the
			// segment then uses is none to the server, which skips the
			// rest of the segment if the DEALLOCATE fails.
			if len(vd.drops) == 1 {
				drop := vd.drops[0]
				ch = &drop
			}
		}
	case 'C':
		if len(body) < 2 {
			return errors.New("pgwire: bad Close message")
		}
		name, _, _ := cstring(body[1:])
		if !asciiName(name) {
			why = whyNameASCII
			break
		}
		name = nameKey(name)
		what := byte('s')
		if body[0] == 'P' {
			what = 'p'
		}
		ch = &change{what: what, name: string(name)}
		if what == 's' && reservedName(string(name)) {
			why = whyName
		}
	}
	if why != "" {
		return c.refuseSegment(c.refusalOf(why))
	}
	if c.needCheck && runsClientCode(t, body, vd) {
		// As in query, for BEGIN with options and SET TRANSACTION (a
		// plain BEGIN gets the check in front); counted at the Execute.
		// A Bind with parameters is not: PostgreSQL runs their types'
		// input functions to convert them (a domain's CHECK may call any
		// function), and takes a snapshot for them, so that a SET
		// TRANSACTION ISOLATION LEVEL so bound fails there anyway. A
		// Describe of such a statement is not either: the check would
		// take its snapshot before the statement runs. What the server
		// holds under the statement's name is made again, as fencegate
		// classified it, in front of such a Bind or Describe (reparse);
		// its Parse has nothing in front (runsClientCode).
		setup := vd != nil && vd.kind == kindSetup && vd.first && (t != 'B' || bindParams(body) == 0)
		if setup && (t != 'E' && c.deferrals < maxDeferrals || t == 'E' && c.deferCheck()) {
			g.deferred = true
			if t != 'E' {
				if err := c.reparse(stmt, vd); err != nil {
					return err
				}
			}
		} else if err := c.check(); err != nil || c.swallow {
			return err
		}
	}
	c.fresh = false
	if ch != nil {
		c.pushChange(g, *ch)
	} else {
		c.push(g)
	}
	if _, err := c.sw.Write(raw); err != nil {
		return err
	}
	if c.cr.streamed() { // a Bind with large parameters
		if err := c.cr.copyBody(c.sw); err != nil {
			return err
		}
	}
	if t == 'E' && vd != nil && vd.kind == kindEnd {
		c.needCheck = true // what follows before Sync runs in a new transaction
	}
	return nil
}

// runsClientCode says whether the server may run code of the client's
// for t, a message of the extended protocol with body, vd being the
// statement it parses, or the statement or portal it names: the
// transaction's check goes in front of it. Bind and Execute run it
// (Bind converts parameters with their types' input functions and may
// plan, and so evaluate, the statement). So does Parse: parse analysis
// converts a literal with its type's input function, and a domain's CHECK
// may call any function (an array of a domain, '{1}'::d[], runs it as the
// statement is parsed); only a statement that sets a transaction up
// (BEGIN, START TRANSACTION, SET TRANSACTION), a utility statement whose
// analysis converts nothing, is exempt, as it must run before the check.
// So does Describe of a statement: PostgreSQL analyses a statement whose
// plan was invalidated (DDL on a table it reads, a changed search_path)
// again to describe it. Describe of a portal does not: it sends the row
// description made at the portal's Bind, and revalidates nothing; it
// would otherwise put the check between a deferred Bind of SET
// TRANSACTION and its Execute, which then fails. Close, Sync and Flush
// run nothing.
func runsClientCode(t byte, body []byte, vd *verdict) bool {
	switch t {
	case 'B', 'E':
		return true
	case 'P':
		return vd.kind != kindSetup
	case 'D':
		return body[0] == 'S'
	}
	return false
}

// localSegment answers the rest of a segment (localHere) of SET
// fencegate.token or SHOW fencegate.token|fence as a prepared statement,
// as the server would answer it (drivers that speak only the extended
// protocol, such as PgJDBC, send every statement so): nothing goes to the
// server. The segment begins with the statement's Parse, or with a Bind
// or Describe of it in a later segment (pgx's describe-exec mode parses
// in one and binds in the next; asyncpg prepares a named statement in one
// and runs it in the next): fencegate holds the statement as its own
// until the client parses another of its name or closes it, for the
// server has an older one of that name, or none. Its Bind, Describe and
// Execute are of that statement and the unnamed portal. A SET changes
// the token at the Sync, as a SET in the segment's implicit transaction
// would at its commit. Anything else is refused, and the token stays.
func (c *session) localSegment(t byte, body []byte) error {
	vd := c.localVd
	why := vd.whyLocal()
	if c.cr.streamed() { // a Bind too large to be of SET or SHOW
		return c.endLocalSegment(c.refusalOf(why))
	}
	switch t {
	case 'B':
		portal, rest, ok1 := cstring(body)
		stmt, rest, ok2 := cstring(rest)
		if !ok1 || !ok2 {
			return errors.New("pgwire: bad Bind message")
		}
		stmt = nameKey(stmt)
		// No parameters (the statement takes none), then the result
		// formats: binary if the only one is.
		rf, ok3 := noParams(rest)
		if len(portal) != 0 || string(stmt) != c.localName || !ok3 {
			return c.endLocalSegment(c.refusalOf(why))
		}
		c.localBinary = len(rf) >= 4 && binary.BigEndian.Uint16(rf) == 1 && binary.BigEndian.Uint16(rf[2:]) == 1
		c.localBound = true
		c.local = append(c.local, '2', 0, 0, 0, 4) // BindComplete
	case 'D':
		if len(body) < 2 {
			return errors.New("pgwire: bad Describe message")
		}
		name, _, ok := cstring(body[1:])
		if !ok {
			return errors.New("pgwire: bad Describe message")
		}
		name = nameKey(name)
		if body[0] == 'S' && string(name) != c.localName || body[0] == 'P' && (len(name) != 0 || !c.localBound) {
			return c.endLocalSegment(c.refusalOf(why))
		}
		if body[0] == 'S' {
			c.local = append(c.local, 't', 0, 0, 0, 6, 0, 0) // no parameters
		}
		if vd.kind == kindShow {
			c.local = appendShowRow(c.local, vd.token, body[0] == 'P' && c.localBinary)
		} else {
			c.local = append(c.local, 'n', 0, 0, 0, 4) // NoData
		}
	case 'E':
		portal, _, ok := cstring(body)
		if !ok {
			return errors.New("pgwire: bad Execute message")
		}
		if len(portal) != 0 || !c.localBound {
			return c.endLocalSegment(c.refusalOf(why))
		}
		if vd.kind == kindShow {
			c.local = appendShowValue(c.local, c.setting(vd.token))
			break
		}
		if _, err := tokens.Parse(vd.token); err != nil {
			return c.endLocalSegment(tokens.Refuse(tokens.ReasonInvalidToken, c.fence, 0, "fencing token %.32q is not a decimal integer in [1, 2^64)", vd.token))
		}
		c.localRan = true
		c.local = appendCommandComplete(c.local, "SET")
	case 'H':
		return c.writeLocal()
	case 'S':
		if c.localRan {
			c.token = vd.token
		}
		c.localVd, c.segStart = nil, true
		return c.answer(appendReadyForQuery(c.local, c.segStatus))
	default:
		return c.endLocalSegment(c.refusalOf(why))
	}
	if len(c.local) >= maxLocal {
		// A client that repeats Describe without Sync gets its answers
		// as they come, as from the server, not held in memory.
		return c.writeLocal()
	}
	return nil
}

// maxLocal bounds the answers localSegment holds before it writes them.
const maxLocal = 16 << 10

// writeLocal writes the answers localSegment holds.
func (c *session) writeLocal() error {
	b := c.local
	c.local = c.local[:0]
	return c.answer(b)
}

// noParams reads the rest of a Bind after its names: it must bind no
// parameters. It returns the result formats (their count first).
func noParams(b []byte) ([]byte, bool) {
	if len(b) < 2 {
		return nil, false
	}
	skip := 2 + 2*int(binary.BigEndian.Uint16(b)) // parameter formats
	if len(b) < skip+4 || binary.BigEndian.Uint16(b[skip:]) != 0 {
		return nil, false
	}
	return b[skip+2:], true
}

// startLocal starts a segment localSegment answers, of vd, the statement
// named name.
func (c *session) startLocal(vd *verdict, name string) {
	c.localVd, c.localName, c.localBound, c.localRan, c.localBinary = vd, name, false, false, false
	c.local = c.local[:0]
}

// endLocalSegment refuses the rest of localSegment's segment with r,
// after the answers so far. Outside a block, the Sync gets ReadyForQuery
// 'I'; in one, the server fails the transaction, as it fails on any error
// (refuseSegment).
func (c *session) endLocalSegment(r *tokens.RefusalError) error {
	c.localVd = nil
	if c.segStatus != 'I' {
		if err := c.writeLocal(); err != nil {
			return err
		}
		return c.refuseSegment(r)
	}
	c.swallow, c.localRFQ = true, true
	return c.answer(refusalError(c.local, r))
}

// setting is the value SHOW fencegate.token or fencegate.fence answers.
func (c *session) setting(name string) string {
	if name == "fencegate.fence" {
		return c.fence
	}
	return c.token
}

// check inserts the fence check before the client's next message: the
// check prepared afresh, a portal bound to it, and Execute.
func (c *session) check() error {
	adm, err := c.s.gw.AdmitSQL(c.ctx, c.fence, c.token)
	if err != nil {
		r, _ := tokens.AsRefusal(err)
		if r == nil {
			r = tokens.Refuse(tokens.ReasonBackendUnavailable, c.fence, 0, "%v", err)
		}
		return c.refuseSegment(r)
	}
	c.checked()
	// Parsed again for each transaction, in the same write as its Bind:
	// a statement of the session's that ran in an earlier transaction can
	// have replaced a check prepared once (dynamic SQL in a DO block or a
	// function deallocates and prepares statements of any name), and a
	// replaced check checks nothing; nothing of the client's runs between
	// this Parse and the Execute. The unnamed statement costs PostgreSQL
	// the least (no Close, nothing saved), unless the client holds one
	// of its own that a later Bind may name.
	b := c.out[:0]
	stmt := ""
	if c.checkOnce || c.lookup('P', 's', nil) != nil {
		stmt = checkName
	}
	if !c.checkOnce || !c.checkPrepared {
		c.checkPrepared = true
		if stmt != "" {
			b = appendClose(b, 'S', stmt)
			c.push(reply{msg: 'C', own: ownCheck, adm: adm, chg: -1})
		}
		b = appendParse(b, stmt, checkSQL)
		c.push(reply{msg: 'P', own: ownCheck, adm: adm, chg: -1})
	}
	// The unnamed portal, unless the client bound one that a later
	// Execute of its own names (a Bind put before the check because it
	// sets the transaction up): then a portal of fencegate's name, closed
	// once run.
	portal := ""
	if c.lookup('B', 'p', nil) != nil {
		portal = checkName
	}
	b = appendBindCheck(b, portal, stmt, c.fence, uint64(adm.Token()))
	b = appendExecute(b, portal)
	c.push(reply{msg: 'B', own: ownCheck, adm: adm, chg: -1})
	c.push(reply{msg: 'E', own: ownCheck, adm: adm, chg: -1})
	if portal != "" {
		b = appendClose(b, 'P', portal)
		c.push(reply{msg: 'C', own: ownCheck, chg: -1})
	}
	c.out = keepBuf(b)
	if _, err := c.sw.Write(b); err != nil {
		return err
	}
	return nil
}

// bindParams is the number of parameter values of a Bind message body,
// -1 if the body is malformed (which the server refuses).
func bindParams(body []byte) int {
	_, rest, ok := cstring(body)
	if !ok {
		return -1
	}
	if _, rest, ok = cstring(rest); !ok || len(rest) < 2 {
		return -1
	}
	nf := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if len(rest) < 2*nf+2 {
		return -1
	}
	return int(binary.BigEndian.Uint16(rest[2*nf:]))
}

// reparse prepares the client's statement name again, with the text
// fencegate classified (vd), in front of a Bind or Describe of it that
// runs before the transaction's check because the statement sets the
// transaction up (SET TRANSACTION): since it was parsed, SQL of the
// session's (DEALLOCATE and PREPARE, in dynamic SQL too) may have replaced
// it with a statement that writes, which would run unfenced, or that a
// Describe analyses again (runsClientCode). Nothing of the client's runs
// between this Parse and its Bind or Describe. The unnamed statement is
// left alone: only the client's Parse, which fencegate sees, replaces it.
// (A statement that sets a transaction up uses no parameters, and a Bind
// that supplies some is not put before the check; one the client parsed
// with parameter types is prepared again without them.)
func (c *session) reparse(name []byte, vd *verdict) error {
	if len(name) == 0 {
		return nil
	}
	b := appendClose(c.out[:0], 'S', string(name))
	b = appendParse(b, string(name), vd.text)
	c.out = keepBuf(b)
	c.push(reply{msg: 'C', own: ownAborted, chg: -1})
	c.push(reply{msg: 'P', own: ownAborted, chg: -1})
	_, err := c.sw.Write(b)
	return err
}

// refuseSegment refuses the rest of an extended-protocol segment: the
// client sees r and, at its Sync, ReadyForQuery. When nothing of the
// segment was sent yet and no transaction is open, fencegate answers
// itself; else a Parse the server fails takes the refused message's
// place, so the server fails the transaction and skips to Sync.
func (c *session) refuseSegment(r *tokens.RefusalError) error {
	if c.idleStart() {
		c.swallow, c.localRFQ = true, true
		return c.answer(c.cerr(r))
	}
	return c.failSegment("fencegate refused", reply{msg: 'P', own: ownRefusal, why: r, chg: -1})
}

// failSegment sends the server, in place of the rest of the segment, a
// Parse of sql under fencegate's own name that it fails, g being its entry
// in the queue, and skips the client's messages up to the segment's Sync,
// as the server skips its own after an error.
func (c *session) failSegment(sql string, g reply) error {
	c.swallow = true
	b := appendParse(c.out[:0], "fencegate_refused", sql)
	c.out = keepBuf(b)
	c.push(g)
	if _, err := c.sw.Write(b); err != nil {
		return err
	}
	return c.sw.Flush()
}

// cerr is refusalError in C2S's buffer.
func (c *session) cerr(r *tokens.RefusalError) []byte {
	b := refusalError(c.out[:0], r)
	c.out = keepBuf(b)
	return b
}

// executesEnd refuses SQL EXECUTE of a statement the protocol prepared
// as a transaction end, CALL or DO (PREPARE itself only takes queries).
func (c *session) executesEnd(vd *verdict) string {
	for _, name := range vd.executes {
		if s := c.lookup('P', 's', []byte(name)); s != nil && (s.kind == kindEnd || s.hasProc) {
			return whyExecuteEnd
		}
	}
	return ""
}
