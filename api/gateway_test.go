package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
)

// db runs setup and check queries directly against PostgreSQL.
func db(t *testing.T) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.WithoutCancel(t.Context())) })
	return c
}

// ledgerTable creates a table of its own for the test and returns its name.
func ledgerTable(t *testing.T, c *pgx.Conn) string {
	t.Helper()
	name := strings.ToLower(strings.ReplaceAll(fenceName(t), "-", "_"))
	if _, err := c.Exec(t.Context(), fmt.Sprintf(
		`DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s(id bigserial primary key, worker text not null, token bigint not null, n int)`, name)); err != nil {
		t.Fatal(err)
	}
	return name
}

func count(t *testing.T, c *pgx.Conn, table string) int {
	t.Helper()
	var n int
	if err := c.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func insert(table, worker string, token int64) string {
	return fmt.Sprintf(`{"sql":"INSERT INTO %s(worker, token) VALUES ($1, $2)","params":[%q,%d]}`, table, worker, token)
}

func wantRefusal(t *testing.T, got httpReply, code int, reason string) {
	t.Helper()
	if got.code != code || got.reason != reason {
		t.Fatalf("got HTTP %d %s (%v), want %d %s", got.code, got.reason, got.body, code, reason)
	}
}

func TestCurrentLeaderAcceptedHTTP(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)

	got := execHTTP(t, r, fence, l.token,
		insert(table, "worker-1", l.token),
		fmt.Sprintf(`{"sql":"UPDATE %s SET n = 18 WHERE worker = $1 RETURNING n, worker","params":["worker-1"]}`, table))
	if got.code != http.StatusOK {
		t.Fatalf("got HTTP %d %v, want 200", got.code, got.body)
	}
	if got.body["fence"] != fence || got.body["token"] != fmt.Sprint(l.token) {
		t.Errorf("got fence %v token %v, want %s %d", got.body["fence"], got.body["token"], fence, l.token)
	}
	res, _ := got.body["results"].([]any)
	if len(res) != 2 {
		t.Fatalf("got %d results, want 2: %v", len(res), got.body)
	}
	first, second := res[0].(map[string]any), res[1].(map[string]any)
	if first["rowsAffected"] != "1" || second["rowsAffected"] != "1" {
		t.Errorf("got rowsAffected %v, %v, want \"1\", \"1\"", first["rowsAffected"], second["rowsAffected"])
	}
	if got, want := fmt.Sprint(second["columns"], second["rows"]), "[n worker] [[18 worker-1]]"; got != want {
		t.Errorf("got RETURNING %s, want %s", got, want)
	}

	f := doHTTP(t, http.MethodGet, r.url+"/v1/fences/"+fence, "", "")
	want := map[string]any{"name": fence, "highWater": fmt.Sprint(l.token), "term": fmt.Sprint(l.token), "leader": "worker-1", "hasLeader": true}
	for k, v := range want {
		if f.body[k] != v {
			t.Errorf("GET fence: got %s=%v, want %v (%v)", k, f.body[k], v, f.body)
		}
	}
	list := doHTTP(t, http.MethodGet, r.url+"/v1/fences", "", "")
	if !strings.Contains(fmt.Sprint(list.body["fences"]), "name:"+fence) {
		t.Errorf("GET /v1/fences: got %v, want it to list %s", list.body, fence)
	}
}

func TestRefusalsHTTP(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	cli := newEtcdClient(t)
	a := campaign(t, cli, fence, "worker-a")
	waitTerm(t, r, fence, a.token)
	if got := execHTTP(t, r, fence, a.token, insert(table, "a", a.token)); got.code != 200 {
		t.Fatalf("leader a: got HTTP %d %v, want 200", got.code, got.body)
	}

	// a resigns: its term is over, no one leads.
	a.resign(t)
	waitTerm(t, r, fence, 0)
	got := execHTTP(t, r, fence, a.token, insert(table, "a", a.token))
	wantRefusal(t, got, 409, "TERM_ENDED")

	// b leads: a is stale even before b writes.
	b := campaign(t, cli, fence, "worker-b")
	waitTerm(t, r, fence, b.token)
	got = execHTTP(t, r, fence, a.token, insert(table, "a", a.token))
	wantRefusal(t, got, 409, "STALE_TOKEN")
	if got.metadata["fence"] != fence || got.metadata["token"] != fmt.Sprint(a.token) || got.metadata["term"] != fmt.Sprint(b.token) {
		t.Errorf("got metadata %v, want fence, token %d and term %d", got.metadata, a.token, b.token)
	}

	// A number no leader ever held.
	forged := b.token + 1000
	got = execHTTP(t, r, fence, forged, insert(table, "mallory", forged))
	wantRefusal(t, got, 400, "UNKNOWN_TERM")
	// and the forgery did not raise the high-water mark: b still writes.
	if got := execHTTP(t, r, fence, b.token, insert(table, "b", b.token)); got.code != 200 {
		t.Fatalf("leader b after forgery: got HTTP %d %v, want 200", got.code, got.body)
	}

	if n := count(t, c, table); n != 2 {
		t.Errorf("got %d rows, want 2 (a's first write and b's)", n)
	}
}

func TestLeaseExpiredIsTermEnded(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	cli := newEtcdClient(t)
	l := campaign(t, cli, fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	// The lease goes away as it would on expiry.
	if _, err := cli.Revoke(t.Context(), l.session.Lease()); err != nil {
		t.Fatal(err)
	}
	waitTerm(t, r, fence, 0)
	wantRefusal(t, execHTTP(t, r, fence, l.token, insert(table, "w", l.token)), 409, "TERM_ENDED")
	if n := count(t, c, table); n != 0 {
		t.Errorf("got %d rows, want 0", n)
	}
}

func TestBadInputHTTP(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	tok := fmt.Sprint(l.token)
	url := r.url + "/v1/fences/" + fence + "/sql"
	good := sqlBody(insert(table, "w", l.token))

	tests := []struct {
		name, url, token, body string
		code                   int
		reason                 string
	}{
		{"missing token", url, "", good, 400, "MISSING_TOKEN"},
		{"malformed token", url, "12abc", good, 400, "INVALID_TOKEN"},
		{"zero token", url, "0", good, 400, "INVALID_TOKEN"},
		{"negative token", url, "-5", good, 400, "INVALID_TOKEN"},
		{"no statements", url, tok, `{"statements":[]}`, 400, "INVALID_REQUEST"},
		{"malformed JSON", url, tok, `{"statements":[{"sql":`, 400, "INVALID_REQUEST"},
		{"unknown field", url, tok, `{"statementz":[]}`, 400, "INVALID_REQUEST"},
		{"text after the JSON", url, tok, good + ` {"statements":[]}`, 400, "INVALID_REQUEST"},
		{"oversized body", url, tok, sqlBody(fmt.Sprintf(`{"sql":"SELECT 1 -- %s"}`, strings.Repeat("x", 70<<10))), 400, "INVALID_REQUEST"},
		{"bad fence name", r.url + "/v1/fences/bad%7Bname%7D/sql", tok, good, 400, "INVALID_REQUEST"},
		{"transaction control", url, tok, sqlBody(insert(table, "w", l.token), `{"sql":"COMMIT"}`), 400, "INVALID_REQUEST"},
		{"failing statement", url, tok, sqlBody(insert(table, "w", l.token), `{"sql":"INSERT INTO no_such_table VALUES (1)"}`), 400, "STATEMENT_FAILED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantRefusal(t, doHTTP(t, http.MethodPost, tt.url, tt.token, tt.body), tt.code, tt.reason)
		})
	}
	// A body that does not decode is named as the caller's, not by the
	// library that read it ("proto: unexpected EOF").
	for body, want := range map[string]string{
		`{"statements":[{"sql":`: "fencegate: INVALID_REQUEST: request body is not a valid request: unexpected EOF",
		`{"statementz":[]}`:      `fencegate: INVALID_REQUEST: request body is not a valid request: (line 1:2): unknown field "statementz"`,
	} {
		if got, _ := doHTTP(t, http.MethodPost, url, tok, body).body["message"].(string); got != want {
			t.Errorf("body %s: got message %q, want %q", body, got, want)
		}
	}
	if n := count(t, c, table); n != 0 {
		t.Errorf("got %d rows after refused writes, want 0", n)
	}
	var hw int64
	err := c.QueryRow(t.Context(), "SELECT token FROM fencegate.fences WHERE name = $1", fence).Scan(&hw)
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("fence row: got high-water %d (err %v), want none: a refused write raised the fence", hw, err)
	}
}

func TestStatementFailedMetadata(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	got := execHTTP(t, r, fence, l.token, insert(table, "w", l.token), `{"sql":"SELECT 1/0"}`)
	wantRefusal(t, got, 400, "STATEMENT_FAILED")
	if got.metadata["sqlstate"] != "22012" || got.metadata["statement"] != "1" {
		t.Errorf("got metadata %v, want sqlstate 22012 and statement 1", got.metadata)
	}
	if n := count(t, c, table); n != 0 {
		t.Errorf("got %d rows, want 0: all or nothing", n)
	}
}

// A replica whose view of etcd is stale still cannot let the old leader
// write once the new leader has written: the backend's check refuses it.
func TestStaleReplicaRefusedByBackend(t *testing.T) {
	live := startReplica(t, true)
	// Stopped, but unaware of it, as a watch lagging behind etcd is: a
	// replica that knows its watch is lost reads etcd instead
	// (TestRedTeam2ReplicaCutFromEtcdAcceptsEndedTerm).
	frozen := startUnawareReplica(t)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	cli := newEtcdClient(t)

	a := campaign(t, cli, fence, "worker-a")
	waitTerm(t, live, fence, a.token)
	waitTerm(t, frozen, fence, a.token)
	frozen.stop() // frozen now believes a leads, forever

	a.resign(t)
	b := campaign(t, cli, fence, "worker-b")
	waitTerm(t, live, fence, b.token)
	if got := execHTTP(t, live, fence, b.token, insert(table, "b", b.token)); got.code != 200 {
		t.Fatalf("leader b: got HTTP %d %v, want 200", got.code, got.body)
	}
	if got := frozen.watcher.Term(fence).Rev; got != a.token {
		t.Fatalf("frozen replica's term: got %d, want %d (its view must be stale for this test)", got, a.token)
	}
	got := execHTTP(t, frozen, fence, a.token, insert(table, "zombie", a.token))
	wantRefusal(t, got, 409, "STALE_TOKEN")
	if got.metadata["highWater"] != fmt.Sprint(b.token) {
		t.Errorf("got highWater %v, want %d from the backend", got.metadata["highWater"], b.token)
	}
	var zombies int
	if err := c.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE worker = 'zombie'").Scan(&zombies); err != nil {
		t.Fatal(err)
	}
	if zombies != 0 {
		t.Errorf("got %d zombie rows, want 0", zombies)
	}
	// The frozen replica never saw b's term, so b's mark is above every term
	// it knows: suspect (it could be a tampered mark), counted and kept out
	// of memory. The backend goes on refusing a.
	if got := metricValue(t, frozen, "fencegate_suspect_high_water_total", map[string]string{"backend": "postgres"}); got != 1 {
		t.Errorf("frozen replica's suspect marks: got %v, want 1", got)
	}
	wantRefusal(t, execHTTP(t, frozen, fence, a.token, insert(table, "zombie", a.token)), 409, "STALE_TOKEN")
	if err := c.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE worker = 'zombie'").Scan(&zombies); err != nil || zombies != 0 {
		t.Errorf("got %d zombie rows (%v), want 0", zombies, err)
	}
}

// A new leader the watch has not delivered is accepted after a
// linearizable read.
func TestNewLeaderVerifiedBeforeWatch(t *testing.T) {
	r := startReplica(t, false)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	if got := execHTTP(t, r, fence, l.token, insert(table, "w", l.token)); got.code != 200 {
		t.Fatalf("got HTTP %d %v, want 200", got.code, got.body)
	}
	wantRefusal(t, execHTTP(t, r, fence, l.token+7, insert(table, "w", l.token+7)), 400, "UNKNOWN_TERM")
}

func TestGRPC(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	cli := newEtcdClient(t)
	a := campaign(t, cli, fence, "worker-a")
	waitTerm(t, r, fence, a.token)

	req := &fencegatev1.ExecRequest{Fence: fence, Statements: []*fencegatev1.Statement{{
		Sql:    "INSERT INTO " + table + "(worker, token) VALUES ($1, $2) RETURNING id",
		Params: []*structpb.Value{structpb.NewStringValue("a"), structpb.NewNumberValue(float64(a.token))},
	}}}
	withToken := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "fencing-token", tok)
	}
	resp, err := r.grpc.Exec(withToken(fmt.Sprint(a.token)), req)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if resp.Token != uint64(a.token) || len(resp.Results) != 1 || resp.Results[0].RowsAffected != 1 || len(resp.Results[0].Rows) != 1 {
		t.Fatalf("got %v, want token %d and one row", resp, a.token)
	}

	a.resign(t)
	b := campaign(t, cli, fence, "worker-b")
	waitTerm(t, r, fence, b.token)
	tests := []struct {
		name   string
		ctx    context.Context
		code   codes.Code
		reason string
	}{
		{"stale", withToken(fmt.Sprint(a.token)), codes.Aborted, "STALE_TOKEN"},
		{"forged", withToken(fmt.Sprint(b.token + 99)), codes.FailedPrecondition, "UNKNOWN_TERM"},
		{"missing", t.Context(), codes.InvalidArgument, "MISSING_TOKEN"},
		{"malformed", withToken("x"), codes.InvalidArgument, "INVALID_TOKEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.grpc.Exec(tt.ctx, req)
			st := status.Convert(err)
			var reason string
			for _, d := range st.Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == "fencegate" {
					reason = info.Reason
				}
			}
			if st.Code() != tt.code || reason != tt.reason {
				t.Errorf("got %v %s (%v), want %v %s", st.Code(), reason, err, tt.code, tt.reason)
			}
		})
	}
	f, err := r.grpc.GetFence(t.Context(), &fencegatev1.GetFenceRequest{Fence: fence})
	if err != nil {
		t.Fatal(err)
	}
	if f.HighWater != uint64(a.token) || f.Term != uint64(b.token) || !f.HasLeader || f.Leader != "worker-b" {
		t.Errorf("got %v, want highWater %d, term %d, leader worker-b", f, a.token, b.token)
	}
}

func TestMetricsAndHealth(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	execHTTP(t, r, fence, l.token, insert(table, "w", l.token))
	execHTTP(t, r, fence, l.token-1, insert(table, "w", l.token))
	redisHTTP(t, r, fence, l.token, fmt.Sprintf(`{"commands":[["SET","{%s}:k","v"]]}`, fence))
	redisHTTP(t, r, fence, l.token, `{"commands":[["FLUSHDB"]]}`)

	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(r.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: got %d, want 200", path, resp.StatusCode)
		}
	}
	problems, err := testutil.GatherAndLint(r.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	body := string(raw)
	for _, want := range []string{
		`fencegate_requests_total{backend="postgres",outcome="accepted"} 1`,
		`fencegate_requests_total{backend="postgres",outcome="stale_token"} 1`,
		`fencegate_requests_total{backend="redis",outcome="accepted"} 1`,
		`fencegate_requests_total{backend="redis",outcome="command_not_allowed"} 1`,
		`fencegate_requests_total{backend="redis",outcome="term_ended"} 0`,
		fmt.Sprintf(`fencegate_rejections_total{fence=%q,reason="stale_token"} 1`, fence),
		`fencegate_request_duration_seconds_bucket{backend="postgres",outcome="accepted"`,
		fmt.Sprintf(`fencegate_fence_high_water{fence=%q} %d`, fence, l.token),
		fmt.Sprintf(`fencegate_election_term{election=%q} %d`, fence, l.token),
		fmt.Sprintf(`fencegate_election_has_leader{election=%q} 1`, fence),
		fmt.Sprintf(`fencegate_election_leader{election=%q,leader="worker-1"} 1`, fence),
		fmt.Sprintf(`fencegate_term_changes_total{election=%q} 1`, fence),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
