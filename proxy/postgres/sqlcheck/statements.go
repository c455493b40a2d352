package sqlcheck

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

const (
	whyTx  = "ends or splits the write's transaction, which must hold the fence check and the write together"
	whySet = "changes settings: SET outlives the write on the pooled connection, and SET LOCAL changes how " +
		"the rest of the write runs (search_path decides what its names mean)"
	whyStmtSession = "leaves session state behind on the pooled connection"
	whyCopy        = "moves data to or from files, programs or the client outside the statement protocol"
	whyCode        = "runs procedural code, which can commit or run SQL this check cannot see"
	whyDefinesCode = "defines code that runs later, unchecked"
	whyPrivileges  = "changes roles, privileges, or the database's or server's configuration"
	whyNoTx        = "cannot run inside the write's transaction"
	whyExplain     = "EXPLAIN ANALYZE runs its statement, and EXPLAIN is not a data statement"
	whyNotData     = "not a data statement"
	whyTemp        = "temporary objects outlive the write on the pooled connection and shadow other names"
	whySelectInto  = "creates a table; not a data statement"
	whyNested      = "only SELECT, INSERT, UPDATE, DELETE and MERGE may be nested in a statement"
)

// stmtRule says whether a statement kind may be widened to by Config.Allow
// (allow is the Config.Allow name; "" for never) and why it is refused.
type stmtRule struct {
	allow string
	why   string
}

// stmtRules covers the statements refused for a stated reason, or allowed
// by name. Every other statement is refused as not a data statement.
var stmtRules = map[protoreflect.Name]stmtRule{
	"TransactionStmt":   {why: whyTx},
	"VariableSetStmt":   {why: whySet},
	"VariableShowStmt":  {why: whyNotData},
	"DiscardStmt":       {why: whyStmtSession},
	"PrepareStmt":       {why: whyStmtSession},
	"ExecuteStmt":       {why: whyStmtSession},
	"DeallocateStmt":    {why: whyStmtSession},
	"ListenStmt":        {why: whyStmtSession},
	"UnlistenStmt":      {why: whyStmtSession},
	"NotifyStmt":        {why: "sends a notification; not a data statement"},
	"DeclareCursorStmt": {why: whyStmtSession},
	"ClosePortalStmt":   {why: whyStmtSession},
	"FetchStmt":         {why: whyStmtSession},
	"LoadStmt":          {why: whyStmtSession},
	"CopyStmt":          {why: whyCopy},
	"DoStmt":            {why: whyCode},
	"CallStmt":          {why: whyCode},
	"VacuumStmt":        {why: whyNoTx},
	"CheckPointStmt":    {why: whyNoTx},
	"ExplainStmt":       {why: whyExplain},

	"CreateFunctionStmt":         {why: whyDefinesCode},
	"AlterFunctionStmt":          {why: whyDefinesCode},
	"RuleStmt":                   {why: whyDefinesCode},
	"CreateTrigStmt":             {why: whyDefinesCode},
	"CreateEventTrigStmt":        {why: whyDefinesCode},
	"AlterEventTrigStmt":         {why: whyDefinesCode},
	"CreateExtensionStmt":        {why: whyDefinesCode},
	"AlterExtensionStmt":         {why: whyDefinesCode},
	"CreatePLangStmt":            {why: whyDefinesCode},
	"CreateCastStmt":             {why: whyDefinesCode},
	"CreateTransformStmt":        {why: whyDefinesCode},
	"DefineStmt":                 {why: whyDefinesCode},
	"CreatePolicyStmt":           {why: whyPrivileges},
	"AlterPolicyStmt":            {why: whyPrivileges},
	"GrantStmt":                  {why: whyPrivileges},
	"GrantRoleStmt":              {why: whyPrivileges},
	"AlterDefaultPrivilegesStmt": {why: whyPrivileges},
	"CreateRoleStmt":             {why: whyPrivileges},
	"AlterRoleStmt":              {why: whyPrivileges},
	"AlterRoleSetStmt":           {why: whyPrivileges},
	"DropRoleStmt":               {why: whyPrivileges},
	"ReassignOwnedStmt":          {why: whyPrivileges},
	"DropOwnedStmt":              {why: whyPrivileges},
	"AlterOwnerStmt":             {why: whyPrivileges},
	"AlterSystemStmt":            {why: whyPrivileges},
	"CreatedbStmt":               {why: whyPrivileges},
	"AlterDatabaseStmt":          {why: whyPrivileges},
	"AlterDatabaseSetStmt":       {why: whyPrivileges},
	"DropdbStmt":                 {why: whyPrivileges},

	"TruncateStmt":      {allow: "truncate", why: whyNotData},
	"LockStmt":          {allow: "lock", why: whyNotData},
	"CreateStmt":        {allow: "ddl", why: whyNotData},
	"CreateTableAsStmt": {allow: "ddl", why: whyNotData},
	"AlterTableStmt":    {allow: "ddl", why: whyNotData},
	"RenameStmt":        {allow: "ddl", why: whyNotData},
	"DropStmt":          {allow: "ddl", why: whyNotData},
	"IndexStmt":         {allow: "ddl", why: whyNotData},
	"ViewStmt":          {allow: "ddl", why: whyNotData},
	"CreateSeqStmt":     {allow: "ddl", why: whyNotData},
	"AlterSeqStmt":      {allow: "ddl", why: whyNotData},
	"CommentStmt":       {allow: "ddl", why: whyNotData},
}

// ddlObjects are the object types Allow "ddl" covers.
var ddlObjects = map[pg_query.ObjectType]bool{
	pg_query.ObjectType_OBJECT_TABLE:         true,
	pg_query.ObjectType_OBJECT_INDEX:         true,
	pg_query.ObjectType_OBJECT_VIEW:          true,
	pg_query.ObjectType_OBJECT_MATVIEW:       true,
	pg_query.ObjectType_OBJECT_SEQUENCE:      true,
	pg_query.ObjectType_OBJECT_COLUMN:        true,
	pg_query.ObjectType_OBJECT_TABCONSTRAINT: true,
}

// isDML reports whether m is a statement that may be nested anywhere.
func isDML(m protoreflect.Message) bool {
	switch m.Interface().(type) {
	case *pg_query.SelectStmt, *pg_query.InsertStmt, *pg_query.UpdateStmt, *pg_query.DeleteStmt, *pg_query.MergeStmt:
		return true
	}
	return false
}

// isStatement reports whether m is a statement node: PostgreSQL names them
// all ...Stmt.
func isStatement(m protoreflect.Message) bool {
	return strings.HasSuffix(string(m.Descriptor().Name()), "Stmt")
}

// widen checks a top-level statement that is not DML: it is refused unless
// Config.Allow names it and it stays within what that name covers.
func (c *Checker) widen(m protoreflect.Message, pos int) *Refusal {
	name := stmtName(m)
	if temporaryTarget(m) {
		return &Refusal{What: name, Pos: pos, Why: whyTemp}
	}
	rule, ok := stmtRules[m.Descriptor().Name()]
	if !ok {
		return &Refusal{What: name, Pos: pos, Why: whyNotData}
	}
	if rule.allow == "" || !c.allow[rule.allow] {
		why := rule.why
		if rule.allow != "" {
			why += ` (fencegate serve --postgres-allow-sql=` + rule.allow + ` permits it)`
		}
		return &Refusal{What: name, Pos: pos, Why: why}
	}
	if !ddlCovers(m) {
		return &Refusal{What: name, Pos: pos, Why: `--postgres-allow-sql=ddl covers tables, indexes, views and sequences only`}
	}
	return nil
}

// temporaryTarget reports whether m creates a temporary object.
func temporaryTarget(m protoreflect.Message) bool {
	var rel *pg_query.RangeVar
	switch x := m.Interface().(type) {
	case *pg_query.CreateStmt:
		rel = x.Relation
	case *pg_query.ViewStmt:
		rel = x.View
	case *pg_query.CreateSeqStmt:
		rel = x.Sequence
	case *pg_query.CreateTableAsStmt:
		rel = x.GetInto().GetRel()
	}
	return rel.GetRelpersistence() == "t"
}

// ddlCovers reports whether a statement Allow "ddl" permits stays on the
// object types it covers, and off ownership and row security.
func ddlCovers(m protoreflect.Message) bool {
	switch x := m.Interface().(type) {
	case *pg_query.DropStmt:
		return ddlObjects[x.RemoveType] && x.RemoveType != pg_query.ObjectType_OBJECT_COLUMN
	case *pg_query.RenameStmt:
		return ddlObjects[x.RenameType] && (x.RenameType != pg_query.ObjectType_OBJECT_COLUMN || ddlObjects[x.RelationType])
	case *pg_query.CommentStmt:
		return ddlObjects[x.Objtype]
	case *pg_query.CreateTableAsStmt:
		return x.Objtype == pg_query.ObjectType_OBJECT_TABLE || x.Objtype == pg_query.ObjectType_OBJECT_MATVIEW
	case *pg_query.AlterTableStmt:
		if !ddlObjects[x.Objtype] {
			return false
		}
		for _, n := range x.Cmds {
			switch n.GetAlterTableCmd().GetSubtype() {
			case pg_query.AlterTableType_AT_ChangeOwner, pg_query.AlterTableType_AT_EnableRowSecurity,
				pg_query.AlterTableType_AT_DisableRowSecurity, pg_query.AlterTableType_AT_ForceRowSecurity,
				pg_query.AlterTableType_AT_NoForceRowSecurity:
				return false
			}
		}
	}
	return true
}

// stmtName is a statement's SQL name for Statement.Kind and refusals.
func stmtName(m protoreflect.Message) string {
	switch x := m.Interface().(type) {
	case *pg_query.SelectStmt:
		return "SELECT"
	case *pg_query.InsertStmt:
		return "INSERT"
	case *pg_query.UpdateStmt:
		return "UPDATE"
	case *pg_query.DeleteStmt:
		return "DELETE"
	case *pg_query.MergeStmt:
		return "MERGE"
	case *pg_query.TransactionStmt:
		return transactionName(x.Kind)
	case *pg_query.VariableSetStmt:
		if x.Kind == pg_query.VariableSetKind_VAR_RESET || x.Kind == pg_query.VariableSetKind_VAR_RESET_ALL {
			return "RESET"
		}
		if x.IsLocal {
			return "SET LOCAL"
		}
		return "SET"
	case *pg_query.VariableShowStmt:
		return "SHOW"
	case *pg_query.ConstraintsSetStmt:
		return "SET CONSTRAINTS"
	case *pg_query.DeclareCursorStmt:
		return "DECLARE CURSOR"
	case *pg_query.ClosePortalStmt:
		return "CLOSE"
	case *pg_query.FetchStmt:
		if x.Ismove {
			return "MOVE"
		}
		return "FETCH"
	case *pg_query.VacuumStmt:
		if !x.IsVacuumcmd {
			return "ANALYZE"
		}
		return "VACUUM"
	case *pg_query.CreateFunctionStmt:
		if x.IsProcedure {
			return "CREATE PROCEDURE"
		}
		return "CREATE FUNCTION"
	case *pg_query.RuleStmt:
		return "CREATE RULE"
	case *pg_query.CreateTrigStmt:
		return "CREATE TRIGGER"
	case *pg_query.CreateEventTrigStmt:
		return "CREATE EVENT TRIGGER"
	case *pg_query.AlterEventTrigStmt:
		return "ALTER EVENT TRIGGER"
	case *pg_query.CreatePLangStmt:
		return "CREATE LANGUAGE"
	case *pg_query.DefineStmt:
		return "CREATE " + objectName(x.Kind)
	case *pg_query.GrantStmt:
		if !x.IsGrant {
			return "REVOKE"
		}
		return "GRANT"
	case *pg_query.GrantRoleStmt:
		if !x.IsGrant {
			return "REVOKE"
		}
		return "GRANT"
	case *pg_query.CreatedbStmt:
		return "CREATE DATABASE"
	case *pg_query.DropdbStmt:
		return "DROP DATABASE"
	case *pg_query.CreateStmt:
		return createName("TABLE", x.Relation)
	case *pg_query.CreateSeqStmt:
		return createName("SEQUENCE", x.Sequence)
	case *pg_query.ViewStmt:
		return createName("VIEW", x.View)
	case *pg_query.CreateTableAsStmt:
		if x.Objtype == pg_query.ObjectType_OBJECT_MATVIEW {
			return "CREATE MATERIALIZED VIEW"
		}
		return createName("TABLE", x.GetInto().GetRel()) + " AS"
	case *pg_query.IndexStmt:
		return "CREATE INDEX"
	case *pg_query.AlterTableStmt:
		return "ALTER " + objectName(x.Objtype)
	case *pg_query.DropStmt:
		return "DROP " + objectName(x.RemoveType)
	case *pg_query.RenameStmt:
		return "ALTER " + objectName(x.RenameType) + " RENAME"
	case *pg_query.CommentStmt:
		return "COMMENT ON " + objectName(x.Objtype)
	case *pg_query.LockStmt:
		return "LOCK TABLE"
	case *pg_query.CheckPointStmt:
		return "CHECKPOINT"
	}
	return camelToSQL(strings.TrimSuffix(string(m.Descriptor().Name()), "Stmt"))
}

func createName(object string, rel *pg_query.RangeVar) string {
	switch rel.GetRelpersistence() {
	case "t":
		return "CREATE TEMP " + object
	case "u":
		return "CREATE UNLOGGED " + object
	}
	return "CREATE " + object
}

func transactionName(k pg_query.TransactionStmtKind) string {
	switch k {
	case pg_query.TransactionStmtKind_TRANS_STMT_BEGIN:
		return "BEGIN"
	case pg_query.TransactionStmtKind_TRANS_STMT_START:
		return "START TRANSACTION"
	case pg_query.TransactionStmtKind_TRANS_STMT_COMMIT:
		return "COMMIT"
	case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK:
		return "ROLLBACK"
	case pg_query.TransactionStmtKind_TRANS_STMT_SAVEPOINT:
		return "SAVEPOINT"
	case pg_query.TransactionStmtKind_TRANS_STMT_RELEASE:
		return "RELEASE SAVEPOINT"
	case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
		return "ROLLBACK TO SAVEPOINT"
	case pg_query.TransactionStmtKind_TRANS_STMT_PREPARE:
		return "PREPARE TRANSACTION"
	case pg_query.TransactionStmtKind_TRANS_STMT_COMMIT_PREPARED:
		return "COMMIT PREPARED"
	case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED:
		return "ROLLBACK PREPARED"
	}
	return "transaction control"
}

// objectName turns OBJECT_MATVIEW into "MATERIALIZED VIEW" and so on.
func objectName(t pg_query.ObjectType) string {
	switch t {
	case pg_query.ObjectType_OBJECT_MATVIEW:
		return "MATERIALIZED VIEW"
	case pg_query.ObjectType_OBJECT_TABCONSTRAINT:
		return "CONSTRAINT"
	}
	return strings.ReplaceAll(strings.TrimPrefix(t.String(), "OBJECT_"), "_", " ")
}

// camelToSQL turns "CreateExtension" into "CREATE EXTENSION".
func camelToSQL(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && 'A' <= r && r <= 'Z' {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}
