package pgterm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/pgterm"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam25RefusedNamesFillTermMemory: pgterm's Term is not the
// memory-only read every other source's is: a name it has not seen is
// added to the fences it follows, up to maxNames (10000), and never
// removed. The gateway calls Term for more than admitted writes: every
// refused write's metric label (proxy.fenceLabel, in finish) asks the
// term source of the fence, NOT_AUTHORIZED and UNAUTHENTICATED refusals
// included, before anything about the caller or the fence is known to
// be legitimate. Once the table is full, store keeps no term of a fence
// not in it (Verify's answer is dropped, polls never read it), so Term
// returns the zero Term for ever and tokens.Decide sends every write of
// that fence to Verify, which the gateway rate limits per fence
// (--verify-rate 10/s, burst 20) as a forged token.
//
// Attack: a caller the policy allows nothing sends 10000 writes, one to
// each of 10000 made-up names under the postgres-term route (rtfill-N).
// Every one is refused NOT_AUTHORIZED. Then a real leader of a new
// election under the same route campaigns and writes 60 times in a row.
//
// What happened (on this code): the refused writes filled the source's
// table; the leader's term is never kept (Term stays zero after Verify
// and after a poll), each of its writes is a verification, and past the
// burst its writes are refused OVERLOADED ("too many tokens above every
// known term"), until fencegate restarts. The poll also reads the 10000
// junk names every interval.
//
// What should happen: a refused request (above all one refused before
// authorization passed) leaves no state in the term source; Term is
// memory-only as the other sources', or the names followed are those of
// admitted writes and are bounded so that a later real election is still
// followed (evicting names with no row, or no admitted write).
//
// Severity: medium (a caller with no rights at all caps every new
// postgres-term fence's leader at the verify rate, permanently until
// restart; no write is wrongly accepted).
func TestRedTeam25RefusedNamesFillTermMemory(t *testing.T) {
	e := rtSetup(t) // tables; its own gateway is not used
	ctx := t.Context()
	src := open(t, pgterm.Config{Poll: time.Hour})
	routes, err := election.ParseRoutes("rt*=postgres-term")
	if err != nil {
		t.Fatal(err)
	}
	router, err := election.NewRouter(nil, routes, map[string]election.Source{election.SourcePostgresTerm: src})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := postgres.NewTermCheck(src.Table(), src.LockKey())
	if err != nil {
		t.Fatal(err)
	}
	pg, err := postgres.Open(ctx, runtimeDSN, postgres.Config{TermCheck: func(fence string) (postgres.TermCheck, bool) {
		if router.KindOf(fence) == election.SourcePostgresTerm {
			return tc, true
		}
		return postgres.TermCheck{}, false
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	pol, err := policy.Parse([]byte(`rules:
  - name: leaders
    principals: ["token:leader"]
    fences: ["rt*"]
    actions: [sql.write]
`))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := proxy.New(proxy.DefaultConfig(), proxy.Options{
		Terms: router, Postgres: pg, Policy: pol, AuthRequired: true, Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	as := func(principal string) context.Context {
		return policy.NewContext(ctx, &policy.Caller{Principal: principal})
	}
	stmt := func(fence string, tok int64) []postgres.Statement {
		return []postgres.Statement{{SQL: "INSERT INTO rt_writes VALUES ($1, $2)", Params: []any{fence, tok}}}
	}

	// The intruder: allowed nothing.
	run := rtRuns.Add(1)
	intruder := as("token:intruder")
	for i := range 10000 {
		fence := fmt.Sprintf("rtfill-%d-%d", run, i)
		_, _, err := gw.Exec(intruder, fence, "1", stmt(fence, 1))
		if r, ok := tokens.AsRefusal(err); !ok || r.Reason != tokens.ReasonNotAuthorized {
			t.Fatalf("intruder's write %d: %v, want NOT_AUTHORIZED", i, err)
		}
	}

	// A real election under the same route, and its leader's writes.
	fence := rtName("rtreal")
	_, term := campaign(t, fence, "hashtext")
	if term == 0 {
		t.Fatal("leader did not win its lock")
	}
	leader := as("token:leader")
	reasons := map[tokens.Reason]int{}
	for range 60 {
		_, _, err := gw.Exec(leader, fence, fmt.Sprint(term), stmt(fence, term))
		if err == nil {
			reasons["accepted"]++
			continue
		}
		r, ok := tokens.AsRefusal(err)
		if !ok {
			t.Fatalf("leader's write: %v", err)
		}
		reasons[r.Reason]++
	}
	if err := src.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mem := src.Term(fence)
	if reasons["accepted"] != 60 {
		t.Errorf("after 10000 NOT_AUTHORIZED writes to made-up names, the current leader of %s (term %d, lock held) "+
			"wrote 60 times: %v; the source's memory of its term after Verify and a poll: %+v (%d names followed)",
			fence, term, reasons, mem, len(src.Terms()))
	}
	_ = e
}
