package sqlcheck

import (
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// walkMessage walks m as the top-level statement and returns the refusal.
func walkMessage(t *testing.T, m protoreflect.Message) *Refusal {
	t.Helper()
	w := walker{c: newChecker(t, testConfig()), root: m.Interface()}
	w.walk(m, 0)
	return w.ref
}

func setConfigCall() *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: &pg_query.FuncCall{
		Funcname: []*pg_query.Node{{Node: &pg_query.Node_String_{String_: &pg_query.String{Sval: "set_config"}}}},
	}}}
}

// TestWalkerReachesEveryNodeField puts a refused call in each field of
// each parse node that can hold an expression, one at a time, and expects
// the walk to find it: no node kind or field is skipped.
func TestWalkerReachesEveryNodeField(t *testing.T) {
	t.Parallel()
	nodeName := (&pg_query.Node{}).ProtoReflect().Descriptor().FullName()
	msgs := protoMessages()
	fields := 0
	for i := range msgs.Len() {
		md := msgs.Get(i)
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
		if err != nil {
			t.Fatalf("FindMessageByName(%s): %v", md.FullName(), err)
		}
		for j := range md.Fields().Len() {
			fd := md.Fields().Get(j)
			if fd.Message() == nil || fd.Message().FullName() != nodeName || md.FullName() == nodeName {
				continue
			}
			m := mt.New()
			v := protoreflect.ValueOfMessage(setConfigCall().ProtoReflect())
			if fd.IsList() {
				m.Mutable(fd).List().Append(v)
			} else {
				m.Set(fd, v)
			}
			fields++
			if r := walkMessage(t, m); r == nil || r.What != "call to set_config" {
				t.Errorf("set_config in %s.%s: got %v, want refused as call to set_config", md.Name(), fd.Name(), r)
			}
		}
	}
	if fields < 400 {
		t.Errorf("got %d Node fields, want the parse tree's hundreds", fields)
	}
}

func TestWalkerRefusesTemporaryRelation(t *testing.T) {
	t.Parallel()
	r := walkMessage(t, (&pg_query.RangeVar{Relname: "jobs", Relpersistence: "t", Location: 3}).ProtoReflect())
	if r == nil || r.What != "temporary relation jobs" || r.Pos != 3 {
		t.Errorf("got %v, want temporary relation jobs at 3", r)
	}
}

func TestWalkerRefusesNestedStatements(t *testing.T) {
	t.Parallel()
	commit := &pg_query.Node{Node: &pg_query.Node_TransactionStmt{TransactionStmt: &pg_query.TransactionStmt{
		Kind: pg_query.TransactionStmtKind_TRANS_STMT_COMMIT,
	}}}
	r := walkMessage(t, (&pg_query.SelectStmt{WhereClause: commit}).ProtoReflect())
	if r == nil || r.What != "COMMIT" || r.Why != whyNested {
		t.Errorf("got %v, want COMMIT refused as nested", r)
	}
}
