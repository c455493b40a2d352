package pgwire

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/pganalyze/pg_query_go/v6/parser"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/fencegate/fencegate/proxy/postgres/sqlcheck"
)

// stmtKind is what fencegate must know of a statement to keep every
// transaction fenced.
type stmtKind uint8

const (
	kindOther      stmtKind = iota
	kindEnd                 // ends the transaction: COMMIT, ROLLBACK, PREPARE TRANSACTION, ...
	kindProc                // CALL or DO: may COMMIT inside when not atomic
	kindSetToken            // SET fencegate.token = N, the whole string
	kindEmpty               // no statement at all
	kindShow                // SHOW fencegate.token or fencegate.fence, the whole string
	kindDiscardAll          // DISCARD ALL, the whole string
	kindSetup               // BEGIN, START TRANSACTION or SET TRANSACTION, every statement of the string (setsUp)
)

// verdict is what fencegate learnt of one SQL string (a Query's, or a
// Parse's), cached by its text.
type verdict struct {
	text    string   // the SQL, the cache's own copy
	kind    stmtKind // of the last statement (of the only one, for Parse)
	refuse  string   // non-empty: refused with FG006, and why
	token   string   // kindSetToken: the new token, as given; kindShow: the setting
	hasProc bool     // some statement is CALL or DO
	// copyFrom: some statement is COPY FROM STDIN, which puts the server
	// in copy-in (copyGate).
	copyFrom bool
	// setup counts the statements the string starts with that set up a
	// transaction (setsUp) when one of them must come before its first
	// query (first: an isolation level, read-only or deferrable mode, a
	// snapshot), and setupEnd is where the next one starts: the fence
	// check goes after them, at character setupAt. For kindSetup, first
	// says whether any does.
	setup    int
	setupEnd int
	setupAt  int
	first    bool
	// executes names the prepared statements SQL EXECUTE runs: one made
	// with the protocol's Parse may be COMMIT.
	executes []string
	// drops are the changes to the session's prepared statements that
	// SQL DEALLOCATE (a name: 's'; ALL: 'S') and DISCARD ALL ('S') make
	// once they ran (PostgreSQL's prepared statements are not
	// transactional), in order.
	drops []change
	// rows lists, in order, the statements whose command tag alone does
	// not tell the audit what rows they changed (rowsOp).
	rows []rowsOp
}

// rowsOp is a statement whose command tag alone does not tell what rows
// it changed (session.countRows): a COPY, whose "COPY n" counts the rows
// it read as well as those it wrote, and SAVEPOINT, RELEASE and ROLLBACK
// TO, whose tags do not name the savepoint.
type rowsOp struct {
	kind rowsOpKind
	name string // the savepoint's, as PostgreSQL compares it
}

type rowsOpKind uint8

const (
	opNone       rowsOpKind = iota
	opCopyFrom              // COPY ... FROM, from the client, a file or a program: writes its rows
	opCopyTo                // COPY ... TO: reads its rows
	opSavepoint             // SAVEPOINT name
	opRelease               // RELEASE [SAVEPOINT] name
	opRollbackTo            // ROLLBACK TO [SAVEPOINT] name, answered "ROLLBACK"
)

// rowsOpOf is n's rowsOp, kind opNone for any other statement.
func rowsOpOf(n *pg_query.Node) rowsOp {
	switch x := n.Node.(type) {
	case *pg_query.Node_CopyStmt:
		if x.CopyStmt.IsFrom {
			return rowsOp{kind: opCopyFrom}
		}
		return rowsOp{kind: opCopyTo}
	case *pg_query.Node_TransactionStmt:
		t := x.TransactionStmt
		switch t.Kind {
		case pg_query.TransactionStmtKind_TRANS_STMT_SAVEPOINT:
			return rowsOp{kind: opSavepoint, name: t.SavepointName}
		case pg_query.TransactionStmtKind_TRANS_STMT_RELEASE:
			return rowsOp{kind: opRelease, name: t.SavepointName}
		case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
			return rowsOp{kind: opRollbackTo, name: t.SavepointName}
		}
	}
	return rowsOp{}
}

// local says fencegate answers the statement itself: SET fencegate.token
// or SHOW fencegate.*.
func (vd *verdict) local() bool { return vd.kind == kindSetToken || vd.kind == kindShow }

// whyLocal is why a local statement is refused in the extended protocol
// where fencegate cannot answer it itself.
func (vd *verdict) whyLocal() string {
	if vd.kind == kindShow {
		return whyShowExt
	}
	return whySetTokenExt
}

// verdicts caches classify by SQL text. Drivers send the same few strings
// over and over; a full cache is simply cleared. It is bounded by the
// texts' bytes as well as by their number: any login, with any token, has
// its SQL classified before the fence check, and a cache of whole texts
// of up to MaxMessage each would hold what clients that wrote nothing
// sent. A text longer than maxVerdictText is classified each time.
type verdicts struct {
	mu    sync.RWMutex
	m     map[string]*verdict
	bytes int // of the texts in m
}

const (
	maxVerdicts     = 4096
	maxVerdictBytes = 4 << 20 // sqlcheck.Config.CacheBytes's default
	maxVerdictText  = 64 << 10
)

func (v *verdicts) get(sql []byte) *verdict {
	v.mu.RLock()
	vd := v.m[string(sql)] // no allocation for the look-up
	v.mu.RUnlock()
	if vd != nil {
		return vd
	}
	vd = classify(string(sql))
	if len(vd.text) > maxVerdictText {
		return vd
	}
	v.mu.Lock()
	if v.m == nil || len(v.m) >= maxVerdicts || v.bytes+len(vd.text) > maxVerdictBytes {
		v.m, v.bytes = make(map[string]*verdict, 256), 0
	}
	if _, ok := v.m[vd.text]; !ok {
		v.m[vd.text] = vd
		v.bytes += len(vd.text)
	}
	v.mu.Unlock()
	return vd
}

const (
	whyEndThenMore = "a transaction end followed by more statements in one string: they would run in a new transaction without the fence check; send them separately"
	whyChain       = "AND CHAIN starts a new transaction without the fence check; send BEGIN separately"
	whyPrepareTx   = "PREPARE TRANSACTION would keep the fence's row locked past the session and its term, until COMMIT or ROLLBACK PREPARED: two-phase commit is not served by the listener"
	whySetting     = "fencegate.* settings are fencegate's: only `SET fencegate.token = N` outside a transaction is allowed"
	whyShow        = "fencegate answers only `SHOW fencegate.token` and `SHOW fencegate.fence`, each as a query of its own"
	whySetConfig   = "set_config may only change settings named by a constant other than fencegate.*"
	whySchema      = "the fencegate schema holds the fences; client SQL must not name it"
	whyName        = "prepared statement names starting with fencegate are fencegate's"
)

// whyDeep refuses what sqlcheck.TooDeep finds too deep for pg_query.
var whyDeep = "the statement nests deeper than fencegate parses (" + strconv.Itoa(sqlcheck.MaxDepth) + " levels), so cannot tell whether it is fenced"

// classify parses sql with PostgreSQL's parser (pg_query) and decides.
func classify(sql string) *verdict {
	vd := &verdict{text: sql}
	// A tree deep enough would overflow the C stack in pg_query: SIGSEGV,
	// the whole process down.
	if _, deep := sqlcheck.TooDeep(sql); deep {
		vd.refuse = whyDeep
		return vd
	}
	tree, err := pg_query.Parse(sql)
	if err != nil {
		var perr *parser.Error
		msg := err.Error()
		if errors.As(err, &perr) {
			msg = perr.Message
		}
		// Cut: the parser quotes the text from its error on, all of it
		// for an unterminated string.
		vd.refuse = "cannot parse the SQL (" + clipText(msg) + "), so cannot tell whether it is fenced"
		return vd
	}
	n := len(tree.Stmts)
	if n == 0 {
		vd.kind = kindEmpty
		return vd
	}
	for i, raw := range tree.Stmts {
		kind, why := classifyStmt(raw.Stmt, n, vd)
		if why == "" && kind == kindEnd && i < n-1 {
			why = whyEndThenMore
		}
		if why == "" {
			why = walkRefusal(raw.Stmt)
		}
		if why != "" {
			vd.refuse = why
			return vd
		}
		if kind == kindProc {
			vd.hasProc = true
		}
		if op := rowsOpOf(raw.Stmt); op.kind != opNone {
			vd.rows = append(vd.rows, op)
		}
		vd.kind = kind
		if vd.setup == i {
			if up, first := setsUp(raw.Stmt); up {
				vd.setup++
				vd.first = vd.first || first
			}
		}
	}
	switch {
	case vd.setup == n:
		vd.kind, vd.setup = kindSetup, 0 // nothing after them to check in front of
	case vd.first:
		vd.setupEnd = int(tree.Stmts[vd.setup].StmtLocation) // just past the ';'
		vd.setupAt = utf8.RuneCountInString(sql[:vd.setupEnd])
	default:
		vd.setup = 0 // the check goes first, before a plain BEGIN
	}
	return vd
}

// setsUp: BEGIN or START TRANSACTION, or SET TRANSACTION; first when
// it sets what PostgreSQL takes only before the transaction's first
// query (BEGIN's options, any SET TRANSACTION).
func setsUp(n *pg_query.Node) (up, first bool) {
	switch x := n.Node.(type) {
	case *pg_query.Node_TransactionStmt:
		t := x.TransactionStmt
		up = t.Kind == pg_query.TransactionStmtKind_TRANS_STMT_BEGIN || t.Kind == pg_query.TransactionStmtKind_TRANS_STMT_START
		return up, up && len(t.Options) > 0
	case *pg_query.Node_VariableSetStmt:
		s := x.VariableSetStmt
		up = s.Kind == pg_query.VariableSetKind_VAR_SET_MULTI && (s.Name == "TRANSACTION" || s.Name == "TRANSACTION SNAPSHOT")
		return up, up
	}
	return false, false
}

func classifyStmt(n *pg_query.Node, count int, vd *verdict) (stmtKind, string) {
	switch x := n.Node.(type) {
	case *pg_query.Node_TransactionStmt:
		t := x.TransactionStmt
		if t.Chain {
			return kindEnd, whyChain
		}
		switch t.Kind {
		case pg_query.TransactionStmtKind_TRANS_STMT_PREPARE:
			return kindEnd, whyPrepareTx
		case pg_query.TransactionStmtKind_TRANS_STMT_COMMIT, pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK,
			pg_query.TransactionStmtKind_TRANS_STMT_COMMIT_PREPARED,
			pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED:
			return kindEnd, ""
		}
	case *pg_query.Node_CallStmt, *pg_query.Node_DoStmt:
		return kindProc, ""
	case *pg_query.Node_VariableSetStmt:
		s := x.VariableSetStmt
		// RESET ALL is allowed: it resets the session's settings, as in
		// a direct session (asyncpg's pool runs it at every release),
		// fencegate.fenced among them, on which no check rests since
		// migration 007. fencegate's own, the token, stays.
		name := strings.ToLower(s.Name)
		if !strings.HasPrefix(name, "fencegate.") {
			return kindOther, ""
		}
		if name == "fencegate.token" && s.Kind == pg_query.VariableSetKind_VAR_SET_VALUE && !s.IsLocal && count == 1 && len(s.Args) == 1 {
			if c := s.Args[0].GetAConst(); c != nil {
				switch {
				case c.GetIval() != nil:
					vd.token = itoa(int64(c.GetIval().Ival))
					return kindSetToken, ""
				case c.GetSval() != nil:
					vd.token = c.GetSval().Sval
					return kindSetToken, ""
				case c.GetFval() != nil: // integers beyond int32
					vd.token = c.GetFval().Fval
					return kindSetToken, ""
				}
			}
		}
		return kindOther, whySetting
	case *pg_query.Node_VariableShowStmt:
		name := strings.ToLower(x.VariableShowStmt.Name)
		if !strings.HasPrefix(name, "fencegate.") {
			return kindOther, ""
		}
		if (name == "fencegate.token" || name == "fencegate.fence") && count == 1 {
			vd.token = name
			return kindShow, ""
		}
		return kindOther, whyShow
	case *pg_query.Node_PrepareStmt:
		if reservedName(x.PrepareStmt.Name) {
			return kindOther, whyName
		}
		if !asciiName(x.PrepareStmt.Name) {
			return kindOther, whyNameASCII
		}
	case *pg_query.Node_ExecuteStmt:
		if !asciiName(x.ExecuteStmt.Name) {
			return kindOther, whyNameASCII
		}
		vd.executes = append(vd.executes, x.ExecuteStmt.Name)
	case *pg_query.Node_DeallocateStmt:
		if !asciiName(x.DeallocateStmt.Name) {
			return kindOther, whyNameASCII
		}
		if x.DeallocateStmt.Isall || x.DeallocateStmt.Name == "" {
			vd.drops = append(vd.drops, change{what: 'S'})
		} else {
			vd.drops = append(vd.drops, change{what: 's', name: string(nameKey([]byte(x.DeallocateStmt.Name)))})
		}
	case *pg_query.Node_CopyStmt:
		if x.CopyStmt.IsFrom && !x.CopyStmt.IsProgram && x.CopyStmt.Filename == "" {
			vd.copyFrom = true
		}
	case *pg_query.Node_DiscardStmt:
		if x.DiscardStmt.Target == pg_query.DiscardMode_DISCARD_ALL && count == 1 {
			vd.drops = append(vd.drops, change{what: 'S'})
			return kindDiscardAll, ""
		}
	}
	return kindOther, ""
}

// reservedName: fencegate's own prepared statements are named fencegate_*.
func reservedName(name string) bool {
	return len(name) >= 9 && strings.EqualFold(name[:9], "fencegate")
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// walkRefusal visits every node of a statement, through protobuf
// reflection so that no node kind is missed, for what names fencegate's
// schema or changes its settings.
func walkRefusal(n *pg_query.Node) string {
	var why string
	var visit func(m protoreflect.Message)
	visit = func(m protoreflect.Message) {
		if why != "" {
			return
		}
		switch x := m.Interface().(type) {
		case *pg_query.RangeVar:
			if strings.EqualFold(x.Schemaname, "fencegate") {
				why = whySchema
				return
			}
		case *pg_query.FuncCall:
			if f := lastName(x.Funcname); strings.EqualFold(f, "set_config") {
				if len(x.Args) == 0 {
					why = whySetConfig
					return
				}
				c := x.Args[0].GetAConst()
				if c == nil || c.GetSval() == nil || strings.HasPrefix(strings.ToLower(strings.TrimSpace(c.GetSval().Sval)), "fencegate.") {
					why = whySetConfig
					return
				}
			}
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				l := v.List()
				if qualifiedNames(l) {
					why = whySchema
					return false
				}
				for i := 0; i < l.Len(); i++ {
					visit(l.Get(i).Message())
				}
			case fd.Message() != nil && !fd.IsMap():
				visit(v.Message())
			}
			return why == ""
		})
	}
	visit(n.ProtoReflect())
	return why
}

// qualifiedNames reports whether l is a list of String nodes (a qualified
// name) whose leading parts name schema fencegate.
func qualifiedNames(l protoreflect.List) bool {
	if l.Len() < 2 {
		return false
	}
	for i := 0; i < l.Len()-1; i++ {
		n, ok := l.Get(i).Message().Interface().(*pg_query.Node)
		if !ok {
			return false
		}
		s := n.GetString_()
		if s == nil {
			return false
		}
		if strings.EqualFold(s.Sval, "fencegate") {
			return true
		}
	}
	return false
}

func lastName(l []*pg_query.Node) string {
	if len(l) == 0 {
		return ""
	}
	if s := l[len(l)-1].GetString_(); s != nil {
		return s.Sval
	}
	return ""
}
