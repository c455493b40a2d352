package postgres

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/fencegate/fencegate/tokens"
)

// stmtCacheSize bounds the prepared statements per connection, as pgx's own
// statement cache does.
const stmtCacheSize = 512

// connState is what fencegate keeps per connection, in its CustomData: the
// statements it prepared and buffers reused by every batch.
type connState struct {
	stmts   map[string]*list.Element // SQL → element holding *pgconn.StatementDescription
	lru     list.List                // front: most recently used
	evicted []string                 // names still to deallocate on the server
	seq     uint64                   // names are never reused, so an evicted one cannot be confused with a new one

	eqb    pgx.ExtendedQueryBuilder
	values [][]byte // one write's parameters, copied out of eqb
	bytes  []byte
	fmts   []int16
	sent   []sentStmt

	// params is the session's reported settings when the connection was
	// first used; a batch that changed any is the last on the connection.
	params [len(reportedParams)]string
	// watchdog cancels the statement running on the connection when the
	// write being read is past its time limit (see armWatchdog).
	watchdog *time.Timer
	armed    atomic.Uint64 // sequence number of the write armed, 0 when none
	fired    atomic.Uint64 // sequence number of the last write the watchdog cancelled
	writeSeq uint64
}

// reportedParams are the settings PostgreSQL reports to the client when
// they change (ParameterStatus). A write cannot change them (its SQL is
// checked, and fencegate's role cannot ALTER ROLE), but if one ever did,
// the connection must not carry the change to the next caller.
var reportedParams = [...]string{
	"application_name", "client_encoding", "DateStyle", "default_transaction_read_only",
	"IntervalStyle", "is_superuser", "search_path", "session_authorization",
	"standard_conforming_strings", "TimeZone",
}

// sentStmt is one statement of a write, encoded and ready to send.
type sentStmt struct {
	sd            *pgconn.StatementDescription
	values        [][]byte
	paramFormats  []int16
	resultFormats []int16
}

const connStateKey = "fencegate.conn"

func stateOf(conn *pgx.Conn) *connState {
	data := conn.PgConn().CustomData()
	if st, ok := data[connStateKey].(*connState); ok {
		return st
	}
	st := &connState{stmts: make(map[string]*list.Element)}
	pc := conn.PgConn()
	for i, k := range reportedParams {
		st.params[i] = pc.ParameterStatus(k)
	}
	st.watchdog = time.AfterFunc(time.Hour, func() { st.cancelArmed(pc) })
	st.watchdog.Stop()
	data[connStateKey] = st
	return st
}

// paramsChanged reports whether a reported setting differs from when the
// connection was first used.
func (st *connState) paramsChanged(pc *pgconn.PgConn) bool {
	for i, k := range reportedParams {
		if pc.ParameterStatus(k) != st.params[i] {
			return true
		}
	}
	return false
}

// armWatchdog starts the time limit of the next write read from the
// connection, and returns its sequence number. PostgreSQL starts a write
// of a batch when it has finished the one before, which is about when
// fencegate has read that one's answers, so each write gets its own
// limit, however slow the writes ahead of it were.
func (st *connState) armWatchdog(limit time.Duration) uint64 {
	st.writeSeq++
	st.armed.Store(st.writeSeq)
	st.watchdog.Reset(limit)
	return st.writeSeq
}

func (st *connState) disarmWatchdog() {
	st.armed.Store(0)
	st.watchdog.Stop()
}

// cancelled reports whether the watchdog cancelled write seq.
func (st *connState) cancelled(seq uint64) bool { return st.fired.Load() == seq }

// cancelArmed runs on the watchdog's goroutine: it asks the server to
// cancel what the connection runs. The cancel may land just after the
// armed write finished, on the next write of the batch; that write then
// fails and rolls back like any cancelled statement.
func (st *connState) cancelArmed(pc *pgconn.PgConn) {
	seq := st.armed.Load()
	if seq == 0 {
		return
	}
	st.fired.Store(seq)
	// The callers' contexts may all have ended; the cancel must still go.
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	_ = pc.CancelRequest(ctx)
	// A server that does not answer the cancel either (stopped, or cut
	// off without a reset) would hold the write, and its caller, until
	// it came back: past cancelGrace the connection's reads end. The
	// write then fails out of step, its outcome unknown, and the
	// connection is closed.
	time.AfterFunc(cancelGrace, func() {
		if st.armed.Load() == seq {
			_ = pc.Conn().SetDeadline(time.Unix(1, 0))
		}
	})
}

const (
	// cancelTimeout bounds sending a cancel request on its own connection.
	cancelTimeout = 2 * time.Second
	// cancelGrace is how long a cancelled write may still take before
	// its connection is given up.
	cancelGrace = 2 * time.Second
)

// lookup returns the statement prepared for sql, or nil.
func (st *connState) lookup(sql string) *pgconn.StatementDescription {
	e, ok := st.stmts[sql]
	if !ok {
		return nil
	}
	st.lru.MoveToFront(e)
	return e.Value.(*pgconn.StatementDescription)
}

// add caches sd. It evicts nothing: the batch that prepared sd may need
// more statements than the cache holds, and uses them all (trim).
func (st *connState) add(sd *pgconn.StatementDescription) {
	st.stmts[sd.SQL] = st.lru.PushFront(sd)
}

// trim evicts the least recently used statements beyond stmtCacheSize,
// once a batch is encoded: none it uses may be gone before it is sent
// (a batch of writes of 64 statements each can use more than 512), and
// their deallocation goes after the batch's writes, in the same pipeline.
func (st *connState) trim() {
	for st.lru.Len() > stmtCacheSize {
		old := st.lru.Remove(st.lru.Back()).(*pgconn.StatementDescription)
		delete(st.stmts, old.SQL)
		st.evicted = append(st.evicted, old.Name)
	}
}

// forget drops the statement prepared for sql, if one is: it is
// deallocated with the next batch, and the next write of sql prepares it
// again.
func (st *connState) forget(sql string) {
	e, ok := st.stmts[sql]
	if !ok {
		return
	}
	st.lru.Remove(e)
	delete(st.stmts, sql)
	st.evicted = append(st.evicted, e.Value.(*pgconn.StatementDescription).Name)
}

// stalePlan says err is the server's refusal to run a prepared statement
// whose result's shape changed since it was prepared (a column added to
// a table under SELECT * or RETURNING *: "cached plan must not change
// result type"), which it refuses every time after, as pgx's own cache
// knows.
func stalePlan(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "0A000"
}

func (st *connState) newName() string {
	st.seq++
	return "fencegate_" + strconv.FormatUint(st.seq, 10)
}

// exec runs a batch of writes on conn: statements the connection has not
// prepared yet in one round trip, then every write in one more, each its
// own implicit transaction. Every call is finished when it returns.
func (b *Backend) exec(ctx context.Context, conn *pgx.Conn, calls []*call) {
	st := stateOf(conn)
	calls = b.prepare(ctx, conn, st, calls)
	if len(calls) == 0 && len(st.evicted) == 0 {
		return
	}

	p := conn.PgConn().StartPipeline(ctx)
	sent := calls[:0]
	for _, c := range calls {
		if at, err := st.encode(conn, c); err != nil {
			c.finish(nil, b.refusal(c, at, &encodeError{err}, false))
			continue
		}
		for _, s := range st.sent {
			// Not SendQueryStatement: pgconn (v5.12) leaves the statement
			// data of requests skipped after an error in its queue, so
			// the next write's results would be read with the wrong
			// descriptions. The portal's own description costs a few
			// bytes.
			p.SendQueryPrepared(s.sd.Name, s.values, s.paramFormats, s.resultFormats)
		}
		p.SendPipelineSync()
		sent = append(sent, c)
	}
	// After this batch's writes, which may still use them.
	st.trim()
	evicted := st.evicted
	st.evicted = nil
	if len(evicted) > 0 {
		for _, name := range evicted {
			p.SendDeallocate(name)
		}
		p.SendPipelineSync()
	}

	if err := p.Flush(); err != nil {
		for _, c := range sent {
			c.finish(nil, b.refusal(c, atAdvance, err, !pgconn.SafeToRetry(err)))
		}
		_ = p.Close()
		return
	}
	for i, c := range sent {
		seq := st.armWatchdog(b.cfg.WriteTimeout)
		results, at, inStep, err := readWrite(conn, p, c)
		st.disarmWatchdog()
		if err == nil {
			c.finish(results, nil)
			continue
		}
		if at >= 0 && at < len(c.stmts) && stalePlan(err) {
			st.forget(c.stmts[at].SQL)
		}
		r := b.refusal(c, at, err, true)
		if st.cancelled(seq) && r.Reason == tokens.ReasonBackendUnavailable {
			var ne net.Error
			switch {
			case isCancel(err):
				r.Msg = "the write ran past its time limit of " + b.cfg.WriteTimeout.String() + " and was rolled back"
			case errors.As(err, &ne) && ne.Timeout():
				r.Msg = "the write ran past its time limit of " + b.cfg.WriteTimeout.String() +
					", and the server answered neither it nor the cancel: the connection was closed, and the write may yet be applied"
			}
		}
		c.finish(nil, r)
		if !inStep {
			// The connection is gone or out of step. After an error the
			// server sent (a FATAL: terminated, shut down), it ran none of
			// the rest; otherwise they may have committed.
			var txs *txStateError
			var big *messageTooLargeError
			if errors.As(err, &txs) || errors.As(err, &big) {
				err = errOutOfStep
			}
			for _, rest := range sent[i+1:] {
				rest.finish(nil, b.refusal(rest, atAdvance, err, true))
			}
			_ = p.Close()
			closeConn(conn)
			return
		}
	}
	// Reads the deallocations' answers; an error here only costs the
	// connection.
	_ = p.Close()
	if st.paramsChanged(conn.PgConn()) {
		closeConn(conn)
	}
}

// errOutOfStep is the error of the writes of a batch after one that left
// its transaction in an unknown state.
var errOutOfStep = errors.New("an earlier write of the batch left the session in an unknown transaction state")

// isCancel: the server cancelled the statement (a cancel request or
// statement_timeout).
func isCancel(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// prepare prepares the statements of calls that conn has not prepared yet,
// in one round trip. It returns the calls that can go on; the others are
// finished.
//
// fencegate's fence checks are prepared as its login, each in a Sync of its
// own: their text is fencegate's, and parsing it runs nothing. A caller's
// statements are not: PostgreSQL's parse analysis converts a literal with
// its type's input function (an array of a domain runs the domain's CHECK,
// which may call any function), so a Parse of a caller's statement is part
// of its write, fenced and as its role. Each call with statements to
// prepare gets a segment of its own: BEGIN, its fence check (which sets its
// role), Parse and Describe of those statements, Sync, then ROLLBACK and
// Sync. A check that fails refuses the call as its write would be, and
// nothing of it is parsed. The rollback undoes what the parse ran and the
// check's raise of the mark (the write's own transaction checks again);
// prepared statements outlive it. A statement two calls use is prepared in
// the first one's segment; if that fails, a next round prepares it in a
// segment of the next call's, so one call's refusal or bad statement fails
// only that call.
func (b *Backend) prepare(ctx context.Context, conn *pgx.Conn, st *connState, calls []*call) []*call {
	for {
		var checks []*pgconn.StatementDescription
		var segs []prepSegment
		var queued map[string]bool // made once something is: none in the steady state
		queue := func(sql string) bool {
			if queued[sql] || st.lookup(sql) != nil {
				return false
			}
			if queued == nil {
				queued = make(map[string]bool)
			}
			queued[sql] = true
			return true
		}
		for _, c := range calls {
			if sql := c.advanceSQL(); queue(sql) {
				checks = append(checks, &pgconn.StatementDescription{Name: st.newName(), SQL: sql})
			}
			seg := prepSegment{c: c}
			for _, s := range c.stmts {
				if !queue(s.SQL) {
					continue
				}
				seg.sds = append(seg.sds, &pgconn.StatementDescription{Name: st.newName(), SQL: s.SQL})
			}
			if len(seg.sds) > 0 {
				segs = append(segs, seg)
			}
		}
		if len(checks) == 0 && len(segs) == 0 {
			return calls
		}
		calls = b.prepareRound(ctx, conn, st, calls, checks, segs)
	}
}

// prepSegment is the statements one call prepares after its fence check.
type prepSegment struct {
	c   *call
	sds []*pgconn.StatementDescription
}

// prepareRound sends checks and segs in one pipeline and reads their
// answers. It returns the calls of calls still to run; a round leaves the
// first call with a segment either finished or with all its statements
// prepared, so prepare's rounds end.
func (b *Backend) prepareRound(ctx context.Context, conn *pgx.Conn, st *connState, calls []*call,
	checks []*pgconn.StatementDescription, segs []prepSegment,
) []*call {
	p := conn.PgConn().StartPipeline(ctx)
	for _, sd := range checks {
		p.SendPrepare(sd.Name, sd.SQL, nil)
		p.SendPipelineSync()
	}
	for _, seg := range segs {
		p.SendQueryParams("BEGIN", nil, nil, nil, nil)
		// Text parameters: the check's are typed in its text, and its
		// description may be in this very pipeline.
		c := seg.c
		args := [][]byte{[]byte(c.fence), strconv.AppendUint(nil, uint64(c.token), 10)}
		if c.role != "" {
			args = append(args, []byte(c.role))
		}
		p.SendQueryPrepared(checkName(st, checks, c.advanceSQL()), args, nil, nil)
		for _, sd := range seg.sds {
			p.SendPrepare(sd.Name, b.sendText(sd.SQL), nil)
		}
		p.SendPipelineSync()
		// In a block of its own: in the implicit transaction PostgreSQL
		// warns (and logs) that none is in progress.
		p.SendQueryParams("ROLLBACK", nil, nil, nil, nil)
		p.SendPipelineSync()
	}

	failedCheck := make(map[string]error)
	finished := make(map[*call]bool)
	at := atAdvance
	var cur *call // the call whose segment is being read
	err := p.Flush()
	for _, sd := range checks {
		if err != nil {
			break
		}
		var res any
		res, err = p.GetResults()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && !conn.PgConn().IsClosed() {
			failedCheck[sd.SQL] = err
			err = nil
			st.evicted = append(st.evicted, sd.Name)
		} else if err == nil {
			err = describe(st, sd, res)
		}
		if err == nil {
			err = expectSync(p)
		}
	}
	for _, seg := range segs {
		if err != nil {
			break
		}
		cur = seg.c
		var segErr error
		at, segErr, err = readPrepSegment(conn, p, st, seg)
		if segErr == nil {
			continue
		}
		finished[seg.c] = true
		if cerr := failedCheck[seg.c.advanceSQL()]; cerr != nil {
			// The check's own Parse failed: its Bind could not run.
			segErr, at = cerr, atAdvance
		}
		seg.c.finish(nil, b.refusal(seg.c, at, segErr, false))
	}
	if cerr := p.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		// The connection is gone or out of step. Nothing of a prepare
		// commits: each segment ends in ROLLBACK, or the server rolls it
		// back when the connection ends.
		closeConn(conn)
		for _, c := range calls {
			if finished[c] {
				continue
			}
			cat := atAdvance
			if c == cur {
				cat = at
			}
			c.finish(nil, b.refusal(c, cat, err, false))
		}
		return nil
	}

	ok := calls[:0]
	for _, c := range calls {
		if finished[c] {
			continue
		}
		if cerr := failedCheck[c.advanceSQL()]; cerr != nil {
			c.finish(nil, b.refusal(c, atAdvance, cerr, false))
			continue
		}
		ok = append(ok, c)
	}
	return ok
}

// checkName is the name of the prepared fence check sql: cached on the
// connection, or among checks, prepared in the same pipeline.
func checkName(st *connState, checks []*pgconn.StatementDescription, sql string) string {
	if sd := st.lookup(sql); sd != nil {
		return sd.Name
	}
	for _, sd := range checks {
		if sd.SQL == sql {
			return sd.Name
		}
	}
	return ""
}

// describe caches sd with the description res the server gave of it.
func describe(st *connState, sd *pgconn.StatementDescription, res any) error {
	got, ok := res.(*pgconn.StatementDescription)
	if !ok {
		return fmt.Errorf("prepare: got %T, want a statement description", res)
	}
	sd.ParamOIDs, sd.Fields = got.ParamOIDs, got.Fields
	st.add(sd)
	return nil
}

// readPrepSegment reads the answers to one call's segment of a prepare
// (see prepare). segErr is the server's refusal of the call, at is where
// (atAdvance, or the index of the statement whose Parse or Describe
// failed); err means the connection is gone or out of step.
func readPrepSegment(conn *pgx.Conn, p *pgconn.Pipeline, st *connState, seg prepSegment) (at int, segErr, err error) {
	at = atAdvance
	serr := func() error {
		for range 2 { // BEGIN, the check
			if err := skipResult(p); err != nil {
				return err
			}
		}
		for _, sd := range seg.sds {
			at = slices.IndexFunc(seg.c.stmts, func(s Statement) bool { return s.SQL == sd.SQL })
			res, err := p.GetResults()
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				// Parse may have succeeded and Describe failed.
				st.evicted = append(st.evicted, sd.Name)
			}
			if err != nil {
				return err
			}
			if err := describe(st, sd, res); err != nil {
				return err
			}
		}
		return nil
	}()
	var pgErr *pgconn.PgError
	switch {
	case serr == nil:
	case errors.As(serr, &pgErr) && !conn.PgConn().IsClosed():
		segErr = serr // the server skips to the Sync
	default:
		return at, nil, serr
	}
	if err := expectSync(p); err != nil {
		return at, segErr, err
	}
	if err := skipResult(p); err != nil { // ROLLBACK
		return at, segErr, err
	}
	if err := expectSync(p); err != nil {
		return at, segErr, err
	}
	if s := conn.PgConn().TxStatus(); s != 'I' {
		return at, segErr, fmt.Errorf("prepare: the session is in transaction state %q after ROLLBACK, not idle", s)
	}
	return at, segErr, nil
}

// expectSync reads the end of a Sync segment.
func expectSync(p *pgconn.Pipeline) error {
	res, err := p.GetResults()
	if err != nil {
		return err
	}
	if _, ok := res.(*pgconn.PipelineSync); !ok {
		return fmt.Errorf("pipeline: got %T, want the end of a Sync", res)
	}
	return nil
}

// encodeError is a parameter pgx could not encode for its statement.
type encodeError struct{ err error }

func (e *encodeError) Error() string { return e.err.Error() }
func (e *encodeError) Unwrap() error { return e.err }

// encode fills st.sent with c's statements, the fence check first. On error
// it returns the index of the statement that failed.
func (st *connState) encode(conn *pgx.Conn, c *call) (int, error) {
	st.sent = st.sent[:0]
	st.values = st.values[:0]
	st.bytes = st.bytes[:0]
	st.fmts = st.fmts[:0]
	var args [3]any
	args[0], args[1], args[2] = c.fence, int64(c.token), c.role
	n := 2
	if c.role != "" {
		n = 3
	}
	if err := st.encodeOne(conn, st.lookup(c.advanceSQL()), args[:n]); err != nil {
		return atAdvance, err
	}
	for i, s := range c.stmts {
		params := make([]any, len(s.Params))
		for j, v := range s.Params {
			params[j] = param(v)
		}
		if err := st.encodeOne(conn, st.lookup(s.SQL), params); err != nil {
			return i, err
		}
	}
	return 0, nil
}

// encodeOne encodes one statement's arguments and copies them out of the
// builder, which the next statement reuses.
func (st *connState) encodeOne(conn *pgx.Conn, sd *pgconn.StatementDescription, args []any) error {
	if err := st.eqb.Build(conn.TypeMap(), sd, args); err != nil {
		return err
	}
	v0 := len(st.values)
	for _, v := range st.eqb.ParamValues {
		if v == nil {
			st.values = append(st.values, nil)
			continue
		}
		start := len(st.bytes)
		st.bytes = append(st.bytes, v...)
		st.values = append(st.values, st.bytes[start:len(st.bytes):len(st.bytes)])
	}
	f0 := len(st.fmts)
	st.fmts = append(st.fmts, st.eqb.ParamFormats...)
	f1 := len(st.fmts)
	st.fmts = append(st.fmts, st.eqb.ResultFormats...)
	st.sent = append(st.sent, sentStmt{
		sd:            sd,
		values:        st.values[v0:len(st.values):len(st.values)],
		paramFormats:  st.fmts[f0:f1:f1],
		resultFormats: st.fmts[f1:len(st.fmts):len(st.fmts)],
	})
	return nil
}

// readWrite reads one write's answers, through the end of its Sync. On
// error it returns where the error was reported, and whether the
// connection is still in step with the server (the error was the server's,
// or an answer fencegate could not decode).
func readWrite(conn *pgx.Conn, p *pgconn.Pipeline, c *call) (results []Result, at int, inStep bool, err error) {
	at = atAdvance
	results = make([]Result, len(c.stmts))
	var undecodable error
	err = func() error {
		if err := skipResult(p); err != nil { // the check
			return err
		}
		for i := range c.stmts {
			res, err := p.GetResults()
			if err != nil {
				at = i
				return err
			}
			rr, err := asResult(res)
			if err == nil {
				err = readResult(conn, rr, &results[i])
			}
			var de *decodeError
			if errors.As(err, &de) {
				if undecodable == nil {
					at, undecodable = i, err
				}
				err = nil
			}
			if err != nil {
				at = i
				return err
			}
		}
		// The implicit transaction commits at the Sync; a deferred
		// constraint or a serialisation failure surfaces here.
		if err := expectSync(p); err != nil {
			at = atCommit
			return err
		}
		// Committed only if the session is idle again: a statement that
		// opened a transaction block would leave it open ('T'), and what
		// follows on the connection would join it.
		if s := conn.PgConn().TxStatus(); s != 'I' {
			at = atCommit
			return &txStateError{status: s}
		}
		return nil
	}()
	if err == nil && undecodable == nil {
		return results, 0, true, nil
	}
	if err == nil {
		return nil, at, true, undecodable
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || conn.PgConn().IsClosed() {
		return nil, at, false, err
	}
	// The server skips the rest of the write up to its Sync.
	if serr := expectSync(p); serr != nil {
		return nil, at, false, serr
	}
	return nil, at, true, err
}

// txStateError is a write whose Sync left the session in a transaction
// block: it did not commit, and may yet commit with whatever runs next on
// the connection.
type txStateError struct {
	status byte   // the session's state after the write's Sync, or
	tag    string // the command that ended or opened a transaction
}

func (e *txStateError) Error() string {
	if e.tag != "" {
		return fmt.Sprintf("a statement of the write ran %q, which ends or opens a transaction", e.tag)
	}
	return fmt.Sprintf("the write left the session in transaction state %q, not idle: not committed", e.status)
}

// endsTransaction reports whether a command tag is of a statement that
// ends, opens or splits a transaction, or may (procedures and DO blocks
// can commit).
func endsTransaction(tag pgconn.CommandTag) bool {
	s := tag.String()
	switch s {
	case "BEGIN", "COMMIT", "ROLLBACK", "START TRANSACTION", "SAVEPOINT", "RELEASE",
		"PREPARE TRANSACTION", "COMMIT PREPARED", "ROLLBACK PREPARED", "DO", "CALL":
		return true
	}
	return false
}

// asResult is res as a statement's result; anything else means fencegate
// and the server are out of step.
func asResult(res any) (*pgconn.ResultReader, error) {
	if rr, ok := res.(*pgconn.ResultReader); ok {
		return rr, nil
	}
	return nil, fmt.Errorf("pipeline: got %T, want a statement's result", res)
}

// skipResult reads the next statement's result in p and drops it: its
// error, if it failed.
func skipResult(p *pgconn.Pipeline) error {
	res, err := p.GetResults()
	if err != nil {
		return err
	}
	rr, err := asResult(res)
	if err != nil {
		return err
	}
	_, err = rr.Close()
	return err
}

// readResult reads one statement's rows and command tag into res.
func readResult(conn *pgx.Conn, rr *pgconn.ResultReader, res *Result) error {
	fds := rr.FieldDescriptions()
	if len(fds) > 0 {
		res.Columns = make([]string, len(fds))
		for i, fd := range fds {
			res.Columns[i] = fd.Name
		}
		res.Rows = [][]any{}
	}
	m := conn.TypeMap()
	var decodeErr error
	for rr.NextRow() {
		if decodeErr != nil {
			continue
		}
		raw := rr.Values()
		row := make([]any, len(raw))
		for i, buf := range raw {
			v, err := decodeValue(m, &fds[i], buf)
			if err != nil {
				decodeErr = &decodeError{fmt.Errorf("column %q: %w", fds[i].Name, err)}
				break
			}
			row[i] = jsonValue(v, fds[i].DataTypeOID)
		}
		res.Rows = append(res.Rows, row)
	}
	tag, err := rr.Close()
	if err != nil {
		return err
	}
	if endsTransaction(tag) {
		// The SQL check refuses these; if one ever ran, part of the write
		// may have committed on its own.
		return &txStateError{tag: tag.String()}
	}
	if decodeErr != nil {
		return decodeErr
	}
	res.RowsAffected = tag.RowsAffected()
	return nil
}

// decodeError is a value fencegate could not decode from the server's
// answer. The connection stays in step; the write may have committed.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

// decodeValue decodes one column as pgx's Rows.Values does: with the type
// map's codec, else text as a string and binary as bytes. json and jsonb
// keep their numbers' text (decodeJSON), which pgx's codec would round to
// float64s.
func decodeValue(m *pgtype.Map, fd *pgconn.FieldDescription, buf []byte) (any, error) {
	if buf == nil {
		return nil, nil
	}
	switch fd.DataTypeOID {
	case jsonOID, jsonbOID:
		return decodeJSON(fd.DataTypeOID, fd.Format, buf)
	case jsonArrayOID, jsonbArrayOID:
		return decodeJSONArray(m, fd.DataTypeOID, fd.Format, buf)
	}
	if t, ok := m.TypeForOID(fd.DataTypeOID); ok {
		return t.Codec.DecodeValue(m, fd.DataTypeOID, fd.Format, buf)
	}
	if fd.Format == pgtype.TextFormatCode {
		return string(buf), nil
	}
	return bytes.Clone(buf), nil
}

// closeConn closes a connection that is out of step with its server, so the
// pool does not hand it out again.
func closeConn(conn *pgx.Conn) {
	if conn.PgConn().IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.PgConn().Close(ctx)
}
