package pgwire_test

import (
	"testing"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestOwnRefusalsAudited: what the listener refuses itself (FG006: SQL
// that would run outside a fenced transaction, the fast-path interface)
// is counted and audited as the gRPC and HTTP paths' invalid requests
// are (proxy.Gateway.RefuseRequest): an operator who watches refusals
// sees a worker whose SQL fencegate turns away, whichever way it came in.
func TestOwnRefusalsAudited(t *testing.T) {
	ctx := t.Context()
	var trail auditTrail
	e := newEnvWith(t, pgwire.Config{}, envOptions{audit: &trail})
	e.table(t, "own_refusals")
	tok, _ := e.lead(t, "own-refusals")
	c := e.connect(t, "own-refusals", tok)
	for _, sql := range []string{
		"COMMIT; INSERT INTO own_refusals (v) VALUES ('after the end')", // idle: answered by fencegate alone
		"BEGIN",
		"INSERT INTO own_refusals (v) VALUES ('in the block')",
		"COMMIT AND CHAIN", // in a block: the server fails it in the refusal's place
	} {
		_, err := c.PgConn().Exec(ctx, sql).ReadAll()
		if sql == "BEGIN" || sql[0] == 'I' {
			if err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			continue
		}
		wantCode(t, err, "FG006")
	}
	n := 0
	for _, r := range trail.records() {
		if r.Fence == "own-refusals" && r.Outcome == "INVALID_REQUEST" {
			n++
			if r.Token != tok {
				t.Errorf("audit record of a refusal has token %d, want the session's %d", r.Token, tok)
			}
		}
	}
	if n != 2 {
		t.Errorf("BROKEN: %d audit records of INVALID_REQUEST for the listener's 2 refusals (records: %+v)", n, trail.records())
	}
	if got := e.count(t, "own_refusals"); got != 0 {
		t.Errorf("%d rows stored", got)
	}
}
