package api_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/audit"
	"github.com/fencegate/fencegate/proxy/policy"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

func resetHTTP(t *testing.T, r *replica, fence string, mark int64) httpReply {
	t.Helper()
	return doHTTP(t, http.MethodPost, r.url+"/v1/fences/"+fence+"/reset", "", fmt.Sprintf(`{"highWater":"%d"}`, mark))
}

// TestResetFence: a monotonic fence poisoned by a forged high token fences
// out the real leader on every replica and in both backends; a reset on
// one replica to the real leader's token lowers the backends' marks, that
// replica's memory and, through etcd, the other replica's, so the real
// leader writes again while its predecessor's zombie stays refused.
func TestResetFence(t *testing.T) {
	routes, err := election.ParseRoutes("mono-*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	rc := replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), routes: routes}
	a, b := startReplicaWith(t, rc), startReplicaWith(t, rc)
	c := db(t)
	table := ledgerTable(t, c)
	fence := "mono-" + fenceName(t)
	cmd := func(v string) string { return fmt.Sprintf(`{"commands":[["SET","{%s}:k",%q]]}`, fence, v) }
	ok := func(what string, got httpReply) {
		t.Helper()
		if got.code != http.StatusOK {
			t.Fatalf("%s: got HTTP %d %s (%v), want 200", what, got.code, got.reason, got.body)
		}
	}

	ok("term 7 on a", execHTTP(t, a, fence, 7, insert(table, "leader", 7)))
	ok("term 7 on b, redis", redisHTTP(t, b, fence, 7, cmd("seven")))
	ok("forged 1000 on b", execHTTP(t, b, fence, 1000, insert(table, "forger", 1000)))
	ok("forged 1000 on a, redis", redisHTTP(t, a, fence, 1000, cmd("forged")))
	// Both replicas now refuse the real leader's next term from memory.
	wantRefusal(t, execHTTP(t, a, fence, 8, insert(table, "leader", 8)), 409, "STALE_TOKEN")
	wantRefusal(t, execHTTP(t, b, fence, 8, insert(table, "leader", 8)), 409, "STALE_TOKEN")
	wantRefusal(t, redisHTTP(t, b, fence, 8, cmd("eight")), 409, "STALE_TOKEN")

	got := resetHTTP(t, a, fence, 8)
	ok("reset to 8", got)
	if got.body["highWaterBefore"] != "1000" || got.body["highWater"] != "8" || got.body["termLowered"] != true {
		t.Fatalf("reset to 8: got %v, want highWaterBefore 1000, highWater 8, termLowered true", got.body)
	}
	var hw int64
	if err := c.QueryRow(t.Context(), "SELECT token FROM fencegate.fences WHERE name = $1", fence).Scan(&hw); err != nil || hw != 8 {
		t.Fatalf("postgres mark after the reset: got %d (%v), want 8", hw, err)
	}
	if v, err := rdb(t).Get(t.Context(), "fencegate:{"+fence+"}:token").Result(); err != nil || v != "8" {
		t.Fatalf("redis mark after the reset: got %q (%v), want 8", v, err)
	}

	ok("term 8 on a after the reset", execHTTP(t, a, fence, 8, insert(table, "leader", 8)))
	// b learns of the reset through etcd.
	waitFor(t, "replica b to admit term 8", func() bool {
		return execHTTP(t, b, fence, 8, insert(table, "leader-b", 8)).code == http.StatusOK
	})
	ok("term 8 on b, redis", redisHTTP(t, b, fence, 8, cmd("eight")))
	wantRefusal(t, execHTTP(t, b, fence, 7, insert(table, "zombie", 7)), 409, "STALE_TOKEN")
	wantRefusal(t, redisHTTP(t, a, fence, 7, cmd("zombie")), 409, "STALE_TOKEN")

	// A reset never raises a mark.
	got = resetHTTP(t, b, fence, 50)
	ok("reset to 50", got)
	if got.body["highWaterBefore"] != "8" || got.body["highWater"] != "8" {
		t.Fatalf("reset above the mark: got %v, want highWaterBefore 8, highWater 8", got.body)
	}
	ok("term 8 after a reset to 50", execHTTP(t, a, fence, 8, insert(table, "leader", 8)))
	// A reset without the mark to lower to is refused: an empty body, or
	// one whose field is misspelt, once read as 0 and forgot the fence,
	// and its predecessor's zombie was then accepted.
	for _, body := range []string{"", "{}", `{"high_water_mark":"8"}`} {
		got := doHTTP(t, http.MethodPost, a.url+"/v1/fences/"+fence+"/reset", "", body)
		wantRefusal(t, got, 400, "INVALID_REQUEST")
		if msg, _ := got.body["message"].(string); body == "{}" && !strings.Contains(msg, "highWater is required") {
			t.Errorf("reset with %q: got message %q, want it to say highWater is required", body, msg)
		}
	}
	wantRefusal(t, execHTTP(t, b, fence, 7, insert(table, "zombie", 7)), 409, "STALE_TOKEN")
	if n := count(t, c, table); n != 5 {
		t.Fatalf("got %d rows, want 5 (7, the forgery, 8 on a, 8 on b, 8 again)", n)
	}
	wantRefusal(t, resetHTTP(t, a, "bad/name", 1), 404, "")
	wantRefusal(t, resetHTTP(t, a, "bad%20name", 1), 400, "INVALID_REQUEST")
}

// TestResetOutOfReach: resetting a fence is an operator's action. A
// statement of a write cannot reach fencegate.reset (the SQL check refuses
// the schema), nor can one run inside a fenced transaction (the function
// refuses), and under a policy the caller needs fence.admin.
func TestResetOutOfReach(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	wantRefusal(t, execHTTP(t, r, fence, l.token, fmt.Sprintf(`{"sql":"SELECT fencegate.reset('%s', 0)"}`, fence)), 400, "INVALID_REQUEST")

	ctx := t.Context()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT fencegate.advance($1, $2)", fence, l.token); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT fencegate.reset($1, 0)", fence)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "FG006" {
		t.Fatalf("reset inside a fenced transaction: got %v, want SQLSTATE FG006", err)
	}

	tx.Rollback(ctx)

	// A client whose statements are not checked (the PostgreSQL listener's,
	// logged in as a role that may call fencegate's functions) clears the
	// transaction's fenced mark first: still refused.
	tx, err = c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT fencegate.advance($1, $2)", fence, l.token); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.set_config('fencegate.fenced', '', true)"); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT fencegate.reset($1, 0)", fence)
	if !errors.As(err, &pe) || pe.Code != "FG006" {
		t.Fatalf("reset inside a fenced transaction whose mark was cleared: got %v, want SQLSTATE FG006", err)
	}

	p, err := policy.Parse([]byte(`rules:
  - name: everyone-writes
    principals: ["*"]
    fences: ["*"]
    actions: [sql.write, redis.write, fence.read]
`))
	if err != nil {
		t.Fatal(err)
	}
	pr := startReplicaWith(t, replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), policy: p})
	got := resetHTTP(t, pr, fence, 1)
	wantRefusal(t, got, 403, "NOT_AUTHORIZED")
	if m := got.metadata["action"]; m != "fence.admin" {
		t.Fatalf("refused reset: got action %v, want fence.admin", m)
	}
	if !strings.Contains(fmt.Sprint(got.body["message"]), "may not fence.admin") {
		t.Fatalf("refused reset: got message %v, want one naming fence.admin", got.body["message"])
	}
}

// TestResetPartly: the backends are reset one after the other. When Redis
// is down, PostgreSQL's mark is lowered and the reset fails naming that,
// so the operator knows where the fence stands; this replica keeps
// refusing from memory, as Redis still holds the forged mark, and the
// reset run again once Redis is back completes it.
func TestResetPartly(t *testing.T) {
	own, err := redisthrowaway.Start(t.Context(), redisthrowaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { own.Close() })
	routes, err := election.ParseRoutes("mono-*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	var trail auditTrail
	r := startReplicaWith(t, replicaConfig{
		watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(),
		routes: routes, redisAddr: own.Addr(), audit: &trail,
	})
	c := db(t)
	table := ledgerTable(t, c)
	fence := "mono-" + fenceName(t)
	cmd := func(v string) string { return fmt.Sprintf(`{"commands":[["SET","{%s}:k",%q]]}`, fence, v) }
	mark := func() int64 {
		t.Helper()
		var hw int64
		if err := c.QueryRow(t.Context(), "SELECT token FROM fencegate.fences WHERE name = $1", fence).Scan(&hw); err != nil {
			t.Fatal(err)
		}
		return hw
	}
	if got := execHTTP(t, r, fence, 1000, insert(table, "forger", 1000)); got.code != http.StatusOK {
		t.Fatalf("forged 1000: got HTTP %d %s", got.code, got.reason)
	}
	if got := redisHTTP(t, r, fence, 1000, cmd("forged")); got.code != http.StatusOK {
		t.Fatalf("forged 1000, redis: got HTTP %d %s", got.code, got.reason)
	}

	// A Redis that keeps its data across the outage: saved, then down.
	oc := goredis.NewClient(&goredis.Options{Addr: own.Addr(), Protocol: 2})
	err = oc.Save(t.Context()).Err()
	oc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Kill(); err != nil {
		t.Fatal(err)
	}
	got := resetHTTP(t, r, fence, 8)
	wantRefusal(t, got, http.StatusServiceUnavailable, "BACKEND_UNAVAILABLE")
	msg, _ := got.body["message"].(string)
	if want := "cannot reset the fence in Redis (the mark in PostgreSQL is already lowered to 8, from 1000: run the reset again when Redis answers): redis: "; !strings.Contains(msg, want) {
		t.Fatalf("reset with Redis down: got message %q, want it to contain %q", msg, want)
	}
	if hw := mark(); hw != 8 {
		t.Fatalf("postgres mark after the partial reset: got %d, want 8", hw)
	}
	// The audit record says where the reset took.
	rec := trail.last(policy.ActionFenceAdmin)
	if rec == nil || rec.Outcome != "BACKEND_UNAVAILABLE (reset in postgres only)" || rec.HighWaterBefore != 1000 || rec.HighWaterAfter != 8 {
		t.Fatalf("audit record of the partial reset: got %+v, want outcome %q, high water 1000 → 8", rec,
			"BACKEND_UNAVAILABLE (reset in postgres only)")
	}
	wantRefusal(t, execHTTP(t, r, fence, 8, insert(table, "leader", 8)), http.StatusConflict, "STALE_TOKEN")

	if err := own.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	// go-redis waits out its dial breaker (one probe a second) after the
	// failed dials.
	waitFor(t, "the reset again with Redis back", func() bool {
		got = resetHTTP(t, r, fence, 8)
		return got.code == http.StatusOK
	})
	if got.body["highWaterBefore"] != "1000" || got.body["highWater"] != "8" {
		t.Fatalf("reset again: got %v, want highWaterBefore 1000 (Redis's), highWater 8", got.body)
	}
	if rec := trail.last(policy.ActionFenceAdmin); rec == nil || rec.Outcome != "accepted" || rec.HighWaterBefore != 1000 || rec.HighWaterAfter != 8 {
		t.Fatalf("audit record of the reset run again: got %+v, want accepted, high water 1000 → 8", rec)
	}
	if got := execHTTP(t, r, fence, 8, insert(table, "leader", 8)); got.code != http.StatusOK {
		t.Fatalf("term 8 after the reset: got HTTP %d %s %v", got.code, got.reason, got.body)
	}
	if got := redisHTTP(t, r, fence, 8, cmd("eight")); got.code != http.StatusOK {
		t.Fatalf("term 8 after the reset, redis: got HTTP %d %s %v", got.code, got.reason, got.body)
	}
}

// auditTrail keeps a replica's audit records.
type auditTrail struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (a *auditTrail) Write(r *audit.Record) {
	a.mu.Lock()
	a.recs = append(a.recs, *r)
	a.mu.Unlock()
}

// last returns the last record of action, or nil.
func (a *auditTrail) last(action policy.Action) *audit.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.recs) - 1; i >= 0; i-- {
		if a.recs[i].Action == string(action) {
			r := a.recs[i]
			return &r
		}
	}
	return nil
}
