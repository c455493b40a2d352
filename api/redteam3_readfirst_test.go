package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam3ReadFirstForgedTokensNotRateLimited: a token above every
// known term (forged, o == Verify) is rate-limited per fence before its
// etcd read (VerifyBurst, then OVERLOADED: TestVerificationRateLimited).
// While the replica's watch is lost every write to an etcd fence is read
// first, and readFirst skipped the limiter for every token, forged ones
// included (f8b6e12's bound is on concurrency only): one client sending
// forged tokens one after another made one linearizable etcd read per
// request, without limit. The limiter's exemption is needed only for
// tokens memory would let through (current terms). (Fences whose source
// is read before every use, redis-lease, stay exempt: each new holder's
// first write is above memory there, TestRedisLeaseReadBeforeUseNotLimited.)
//
// The watch here follows etcd; lostWatch only says it does not, as a
// watcher that lost its stream would (election.Freshness).
func TestRedTeam3ReadFirstForgedTokensNotRateLimited(t *testing.T) {
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	cli := newEtcdClient(t)
	w := runWatcher(t, cli)
	pg := openPostgres(t)
	cfg := proxy.DefaultConfig()
	cfg.VerifyBurst = 3
	cfg.VerifyRate = 0.001 // no refill within the test
	gw, err := proxy.New(cfg, proxy.Options{Terms: lostWatch{w}, Postgres: pg})
	if err != nil {
		t.Fatal(err)
	}
	leader := campaign(t, cli, fence, "leader")
	waitFor(t, "term", func() bool { return w.Term(fence).Rev == leader.token })
	const tries = 20
	read := 0
	start := time.Now()
	for i := range tries {
		forged := leader.token + 1000 + int64(i)
		stmt := postgres.Statement{SQL: "INSERT INTO " + table + "(worker, token) VALUES ($1, $2)", Params: []any{"mallory", forged}}
		_, _, err := gw.Exec(t.Context(), fence, fmt.Sprint(forged), []postgres.Statement{stmt})
		r, ok := tokens.AsRefusal(err)
		switch {
		case !ok:
			t.Fatalf("forged token %d: got %v, want a refusal", forged, err)
		case r.Reason == tokens.ReasonUnknownTerm:
			read++ // decided by an etcd read
		case r.Reason != tokens.ReasonOverloaded:
			t.Fatalf("forged token %d: got %v, want UNKNOWN_TERM or OVERLOADED", forged, err)
		}
	}
	t.Logf("%d forged tokens in %v: %d read etcd", tries, time.Since(start), read)
	if read > cfg.VerifyBurst {
		t.Errorf("%d forged tokens, one after another, to a fence read before use: %d were verified with an etcd read, want at most the verify burst %d (the rest OVERLOADED)", tries, read, cfg.VerifyBurst)
	}
	// The leader's current token is not held back by the forged ones.
	stmt := postgres.Statement{SQL: "INSERT INTO " + table + "(worker, token) VALUES ($1, $2)", Params: []any{"leader", leader.token}}
	if _, _, err := gw.Exec(t.Context(), fence, fmt.Sprint(leader.token), []postgres.Statement{stmt}); err != nil {
		t.Errorf("the leader's write after the forged ones: %v", err)
	}
}

// lostWatch is a term source whose watch says it has fallen behind
// (election.Freshness), so every write to it is read first.
type lostWatch struct{ *election.Watcher }

func (lostWatch) Fresh(string) bool { return false }
