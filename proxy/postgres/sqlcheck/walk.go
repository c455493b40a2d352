package sqlcheck

import (
	"fmt"
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

const (
	whyFencegate = "the fencegate schema holds the fences; caller SQL must not name it"
	whyOperator  = "an operator qualified with a schema other than pg_catalog runs code the caller chose"
	whyCatalog   = "writes to the system catalogs (pg_settings's update rule calls set_config)"
)

// checkTree checks a parsed statement: its top-level kind, then every node
// of its tree. pos is where the statement starts.
func (c *Checker) checkTree(root *pg_query.Node, pos int) (Statement, *Refusal) {
	m := nodeMessage(root)
	if m == nil {
		return Statement{}, &Refusal{What: "empty SQL", Pos: pos, Why: "no statement"}
	}
	st := Statement{Kind: stmtName(m)}
	switch x := m.Interface().(type) {
	case *pg_query.SelectStmt:
		st.ReturnsRows = true
	case *pg_query.InsertStmt:
		st.ReturnsRows = len(x.ReturningList) > 0
	case *pg_query.UpdateStmt:
		st.ReturnsRows = len(x.ReturningList) > 0
	case *pg_query.DeleteStmt:
		st.ReturnsRows = len(x.ReturningList) > 0
	case *pg_query.MergeStmt:
		st.ReturnsRows = len(x.ReturningList) > 0
	default:
		if ref := c.widen(m, pos); ref != nil {
			return Statement{}, ref
		}
	}
	w := walker{c: c, root: m.Interface()}
	w.walk(m, pos)
	if w.ref != nil {
		return Statement{}, w.ref
	}
	st.ModifyingCTE = w.modifyingCTE
	return st, nil
}

// nodeMessage returns the message a Node holds, or nil.
func nodeMessage(n *pg_query.Node) protoreflect.Message {
	m := n.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().Get(0))
	if fd == nil {
		return nil
	}
	return m.Get(fd).Message()
}

// walker visits every message of a parse tree through protobuf
// reflection, so that no node kind can be missed, and stops at the first
// refusal.
type walker struct {
	c            *Checker
	root         any
	ref          *Refusal
	modifyingCTE bool
}

type fieldKey struct{ msg, field protoreflect.Name }

// columnLists are lists of plain names that are never schema-qualified
// (column lists, field selections); every other list of names is read as
// a qualified name whose leading parts are schemas. A list missing here is
// read too strictly, never too loosely.
var columnLists = map[fieldKey]bool{
	{"Alias", "colnames"}:                  true,
	{"JoinExpr", "using_clause"}:           true,
	{"CommonTableExpr", "aliascolnames"}:   true,
	{"CommonTableExpr", "ctecolnames"}:     true,
	{"CTESearchClause", "search_col_list"}: true,
	{"CTECycleClause", "cycle_col_list"}:   true,
	{"IntoClause", "col_names"}:            true,
	{"ViewStmt", "aliases"}:                true,
	{"Constraint", "keys"}:                 true,
	{"Constraint", "including"}:            true,
	{"Constraint", "fk_attrs"}:             true,
	{"Constraint", "pk_attrs"}:             true,
	{"Constraint", "fk_del_set_cols"}:      true,
	{"ResTarget", "indirection"}:           true,
	{"A_Indirection", "indirection"}:       true, // checked in visit
	{"ColumnRef", "fields"}:                true, // checked in visit
}

func (w *walker) walk(m protoreflect.Message, pos int) {
	if fd := m.Descriptor().Fields().ByName("location"); fd != nil && fd.Kind() == protoreflect.Int32Kind {
		if p := int(m.Get(fd).Int()); p >= 0 {
			pos = p
		}
	}
	w.visit(m, pos)
	if w.ref != nil {
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil || fd.IsMap():
		case fd.IsList():
			l := v.List()
			w.qualifiedName(m, fd, l, pos)
			for i := 0; i < l.Len() && w.ref == nil; i++ {
				w.walk(l.Get(i).Message(), pos)
			}
		default:
			w.walk(v.Message(), pos)
		}
		return w.ref == nil
	})
}

func (w *walker) refuse(what string, pos int, why string) {
	if w.ref == nil {
		w.ref = &Refusal{What: what, Pos: pos, Why: why}
	}
}

// visit checks one message on its own.
func (w *walker) visit(m protoreflect.Message, pos int) {
	switch x := m.Interface().(type) {
	case *pg_query.RangeVar:
		for _, s := range []string{x.Catalogname, x.Schemaname} {
			if why := schemaRefused(s); why != "" {
				w.refuse(dotted(x.Catalogname, x.Schemaname, x.Relname), pos, why)
			}
		}
		if x.Relpersistence == "t" {
			w.refuse("temporary relation "+x.Relname, pos, whyTemp)
		}
		if _, view := w.root.(*pg_query.ViewStmt); view && x.Relname == "pg_settings" && (x.Schemaname == "" || x.Schemaname == "pg_catalog") {
			// An update of the view goes through pg_settings's rule, which
			// calls set_config: a setting of the session, kept by the
			// pooled connection for the next caller.
			w.refuse("view over "+dotted(x.Catalogname, x.Schemaname, x.Relname), pos, whyCatalog)
		}
	case *pg_query.FuncCall:
		w.funcCall(x, pos)
	case *pg_query.ColumnRef:
		w.columnRef(x, pos)
	case *pg_query.A_Indirection:
		for _, n := range x.Indirection {
			w.attributeCall(n.GetString_().GetSval(), pos)
		}
	case *pg_query.A_Expr:
		w.operator(x.Name, pos)
	case *pg_query.SubLink:
		w.operator(x.OperName, pos)
	case *pg_query.SortBy:
		w.operator(x.UseOp, pos)
	case *pg_query.InsertStmt:
		w.target(x.Relation, pos)
	case *pg_query.UpdateStmt:
		w.target(x.Relation, pos)
	case *pg_query.DeleteStmt:
		w.target(x.Relation, pos)
	case *pg_query.MergeStmt:
		w.target(x.Relation, pos)
	case *pg_query.SelectStmt:
		if x.IntoClause != nil {
			if p := x.IntoClause.GetRel().GetLocation(); p >= 0 {
				pos = int(p)
			}
			w.refuse("SELECT INTO", pos, whySelectInto)
		}
	case *pg_query.CommonTableExpr:
		switch x.GetCtequery().GetNode().(type) {
		case *pg_query.Node_InsertStmt, *pg_query.Node_UpdateStmt, *pg_query.Node_DeleteStmt, *pg_query.Node_MergeStmt:
			w.modifyingCTE = true
		}
	}
	if w.ref == nil && nestedStatement(m, w.root) {
		w.refuse(stmtName(m), pos, whyNested)
	}
}

// nestedStatement reports whether m is a statement, other than the
// top-level one, that may not be nested.
func nestedStatement(m protoreflect.Message, root any) bool {
	return isStatement(m) && m.Interface() != root && !isDML(m)
}

// target refuses writes to the system catalogs: pg_catalog is searched
// first, so an unqualified pg_settings is the catalog's, and updating it
// sets session-level settings through a rule.
func (w *walker) target(rel *pg_query.RangeVar, pos int) {
	switch {
	case rel == nil:
	case rel.Schemaname == "pg_catalog" || rel.Schemaname == "information_schema" || rel.Schemaname == "pg_toast",
		rel.Schemaname == "" && rel.Relname == "pg_settings":
		if rel.Location >= 0 {
			pos = int(rel.Location)
		}
		w.refuse("write to "+dotted(rel.Catalogname, rel.Schemaname, rel.Relname), pos, whyCatalog)
	}
}

// qualifiedName checks a list of names read as a qualified name: none of
// its leading parts may be the fencegate schema or a temporary schema.
func (w *walker) qualifiedName(m protoreflect.Message, fd protoreflect.FieldDescriptor, l protoreflect.List, pos int) {
	if l.Len() < 2 || columnLists[fieldKey{m.Descriptor().Name(), fd.Name()}] {
		return
	}
	for i := 0; i < l.Len()-1; i++ {
		n, ok := l.Get(i).Message().Interface().(*pg_query.Node)
		if !ok {
			return
		}
		if why := schemaRefused(n.GetString_().GetSval()); why != "" {
			w.refuse(listName(l), pos, why)
			return
		}
	}
}

// schemaRefused returns why naming schema s is refused, or "". Names are
// compared as the parser left them: unquoted ones are already lower case,
// and quoted ones are exact, as PostgreSQL resolves them.
func schemaRefused(s string) string {
	switch {
	case s == "fencegate":
		return whyFencegate
	case s == "pg_temp" || strings.HasPrefix(s, "pg_temp_") || strings.HasPrefix(s, "pg_toast_temp_"):
		return whyTemp
	}
	return ""
}

func (w *walker) funcCall(x *pg_query.FuncCall, pos int) {
	name := lastName(x.Funcname)
	if why := refusedFunc(name); why != "" {
		w.refuse("call to "+nodesName(x.Funcname), pos, why)
		return
	}
	if isSleep(name) {
		if why := w.sleepRefused(name, x.Args); why != "" {
			w.refuse("call to "+nodesName(x.Funcname), pos, why)
		}
	}
}

// columnRef checks a column reference: with three or more parts its
// leading ones may be a schema, and t.f may call f(t) (attribute notation).
func (w *walker) columnRef(x *pg_query.ColumnRef, pos int) {
	if len(x.Fields) >= 3 {
		for _, n := range x.Fields[:len(x.Fields)-1] {
			if why := schemaRefused(n.GetString_().GetSval()); why != "" {
				w.refuse(nodesName(x.Fields), pos, why)
				return
			}
		}
	}
	if len(x.Fields) >= 2 {
		w.attributeCall(lastName(x.Fields), pos)
	}
}

// attributeCall refuses t.f and (v).f where f is a refused function, by
// the same rules as a call: PostgreSQL reads either as f(t) when t has no
// field f, for a value of any type (('…'::text).dblink_exec runs
// dblink_exec), and which t is cannot be told without the catalog. So a
// qualified column named like a refused function (t.lo_bound, for lo_*)
// is refused too: name it unqualified.
func (w *walker) attributeCall(name string, pos int) {
	if why := refusedFunc(name); why != "" {
		w.refuse("call to "+name+" (attribute notation)", pos, why)
	}
}

// operator refuses operator names qualified with a schema other than
// pg_catalog.
func (w *walker) operator(names []*pg_query.Node, pos int) {
	if len(names) > 2 || len(names) == 2 && names[0].GetString_().GetSval() != "pg_catalog" {
		w.refuse("operator "+nodesName(names), pos, whyOperator)
	}
}

// sleepRefused returns why a call to a pg_sleep function is refused, or "".
func (w *walker) sleepRefused(name string, args []*pg_query.Node) string {
	maxSleep := w.c.maxSleep
	switch {
	case maxSleep == 0:
		return "sleeps, and Config.MaxSleep is 0"
	case name == "pg_sleep_until":
		return "sleeps until a point in time, so how long is not known before it runs"
	case len(args) != 1:
		return "sleeps for a time not known before it runs"
	}
	var secs float64
	var ok bool
	if name == "pg_sleep" {
		secs, ok = constSeconds(args[0])
	} else {
		secs, ok = constInterval(args[0])
	}
	switch {
	case !ok:
		return "sleeps for a time not known before it runs (only a constant is read)"
	case secs > maxSleep.Seconds():
		return fmt.Sprintf("sleeps %s, longer than Config.MaxSleep %v", strconv.FormatFloat(secs, 'g', -1, 64)+"s", maxSleep)
	}
	return ""
}

// constSeconds reads a numeric constant.
func constSeconds(n *pg_query.Node) (float64, bool) {
	c := n.GetAConst()
	switch {
	case c == nil || c.Isnull:
		return 0, false
	case c.GetIval() != nil:
		return float64(c.GetIval().GetIval()), true
	case c.GetFval() != nil:
		f, err := strconv.ParseFloat(c.GetFval().GetFval(), 64)
		return f, err == nil
	}
	return 0, false
}

// constInterval reads an interval constant: '1 second', or cast to
// interval without a field restriction (interval '1' minute is a minute).
func constInterval(n *pg_query.Node) (float64, bool) {
	if tc := n.GetTypeCast(); tc != nil {
		names := tc.GetTypeName().GetNames()
		if lastName(names) != "interval" || len(tc.GetTypeName().GetTypmods()) > 0 ||
			len(names) > 2 || len(names) == 2 && names[0].GetString_().GetSval() != "pg_catalog" {
			return 0, false
		}
		n = tc.Arg
	}
	c := n.GetAConst()
	if c == nil || c.Isnull || c.GetSval() == nil {
		return 0, false
	}
	return intervalSeconds(c.GetSval().GetSval())
}

func lastName(names []*pg_query.Node) string {
	if len(names) == 0 {
		return ""
	}
	return names[len(names)-1].GetString_().GetSval()
}

// nodesName joins a list of names with dots, as written ("*" for a star).
func nodesName(names []*pg_query.Node) string {
	parts := make([]string, len(names))
	for i, n := range names {
		switch {
		case n.GetString_() != nil:
			parts[i] = n.GetString_().GetSval()
		case n.GetAStar() != nil:
			parts[i] = "*"
		default:
			parts[i] = "?"
		}
	}
	return strings.Join(parts, ".")
}

func listName(l protoreflect.List) string {
	names := make([]*pg_query.Node, l.Len())
	for i := range names {
		names[i], _ = l.Get(i).Message().Interface().(*pg_query.Node)
	}
	return nodesName(names)
}

func dotted(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}
