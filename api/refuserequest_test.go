package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fencegate/fencegate/api"
	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
)

// TestUnreadableWritesGoThroughThePipeline: a write the transport cannot
// turn into statements or commands (a parameter beyond 2^53, a Redis
// argument that is a boolean, a gRPC message or HTTP body over the limit,
// JSON that does not parse, two Fencing-Token headers) is refused like
// any other write: the caller is authorized first, so a caller the policy
// refuses is told NOT_AUTHORIZED and not what is wrong with its request;
// and the refusal is counted in fencegate_requests_total and audited.
// Nothing is written.
func TestUnreadableWritesGoThroughThePipeline(t *testing.T) {
	fence := fenceName(t)
	denied := fence + "-denied"
	p, err := policy.Parse([]byte(fmt.Sprintf(`rules:
  - name: writers
    principals: ["*"]
    fences: [%q]
    actions: [sql.write, redis.write]
`, fence)))
	if err != nil {
		t.Fatal(err)
	}
	alog, records := testAudit(t)
	r := startReplicaWith(t, replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), policy: p, audit: alog})
	c := db(t)
	table := ledgerTable(t, c)
	const token = "7"
	ins := fmt.Sprintf("INSERT INTO %s(worker, token) VALUES ($1, $2)", table)

	type answer struct {
		code   int
		reason string
	}
	type write struct {
		name    string
		backend string // the backend label it is counted under
		send    func(fence string) answer
		reason  string // the refusal of an authorized caller
	}
	grpcSend := func(call func(fence string) error) func(string) answer {
		return func(fence string) answer { return answer{reason: rtReason(call(fence))} }
	}
	gctx := metadata.AppendToOutgoingContext(t.Context(), "fencing-token", token)
	httpSend := func(op, body string, hdr [][2]string, cl int64) func(string) answer {
		return func(fence string) answer {
			got := rtDo(t, http.MethodPost, r.url+"/v1/fences/"+fence+"/"+op, hdr, strings.NewReader(body), cl)
			return answer{got.code, got.reason}
		}
	}
	big := strings.Repeat("x", 80<<10) // over the replica's 64 KiB limit, under twice it
	writes := []write{
		{"grpc param beyond 2^53", "postgres", grpcSend(func(f string) error {
			_, err := r.grpc.Exec(gctx, &fencegatev1.ExecRequest{Fence: f, Statements: []*fencegatev1.Statement{{
				Sql: ins, Params: []*structpb.Value{structpb.NewStringValue("m"), structpb.NewNumberValue(1 << 60)},
			}}})
			return err
		}), "INVALID_REQUEST"},
		{"grpc message over the limit", "postgres", grpcSend(func(f string) error {
			_, err := r.grpc.Exec(gctx, &fencegatev1.ExecRequest{Fence: f, Statements: []*fencegatev1.Statement{{
				Sql: ins + " -- " + big, Params: []*structpb.Value{structpb.NewStringValue("m"), structpb.NewNumberValue(7)},
			}}})
			return err
		}), "INVALID_REQUEST"},
		{"grpc redis argument true", "redis", grpcSend(func(f string) error {
			_, err := r.grpc.Redis(gctx, &fencegatev1.RedisRequest{Fence: f, Commands: []*structpb.ListValue{{Values: []*structpb.Value{
				structpb.NewStringValue("SET"), structpb.NewStringValue("{" + f + "}:k"), structpb.NewBoolValue(true),
			}}}})
			return err
		}), "INVALID_REQUEST"},
		{
			"http body over the limit", "postgres",
			httpSend("sql", `{"statements":[{"sql":"INSERT INTO `+table+`(worker, token) VALUES ('m', 7) -- `+big+`"}]}`, jsonHdr("Fencing-Token", token), 0), "INVALID_REQUEST",
		},
		{
			"http chunked body over the limit", "postgres",
			httpSend("sql", `{"statements":[{"sql":"INSERT INTO `+table+`(worker, token) VALUES ('m', 7) -- `+big+`"}]}`, jsonHdr("Fencing-Token", token), -1), "INVALID_REQUEST",
		},
		{
			"http malformed json", "postgres",
			httpSend("sql", `{"statements":[{"sql":"INSERT INTO `+table+`(worker, token) VALUES ('m', 7)"}`, jsonHdr("Fencing-Token", token), 0), "INVALID_REQUEST",
		},
		{
			"http unknown field", "redis",
			httpSend("redis", `{"commands":[["SET","{k}:k","v"]],"pipeline":true}`, jsonHdr("Fencing-Token", token), 0), "INVALID_REQUEST",
		},
		{
			"http two token headers", "postgres",
			httpSend("sql", sqlBody(insert(table, "m", 7)), jsonHdr("Fencing-Token", token, "Fencing-Token", "8"), 0), "INVALID_TOKEN",
		},
	}

	refused := map[string]map[string]int{"postgres": {}, "redis": {}}
	sent := 0
	for _, w := range writes {
		for _, f := range []string{fence, denied} {
			want := w.reason
			if f == denied {
				want = "NOT_AUTHORIZED"
			}
			got := w.send(f)
			if got.reason != want {
				t.Errorf("%s, fence %s: got %+v, want %s", w.name, f, got, want)
			}
			refused[w.backend][strings.ToLower(want)]++
			sent++
		}
	}

	for backend, byOutcome := range refused {
		for outcome, n := range byOutcome {
			if got := metricValue(t, r, "fencegate_requests_total", map[string]string{"backend": backend, "outcome": outcome}); got != float64(n) {
				t.Errorf(`fencegate_requests_total{backend=%q,outcome=%q}: got %v, want %d`, backend, outcome, got, n)
			}
		}
	}

	lines, raw := records()
	if len(lines) != sent {
		t.Errorf("audit log: got %d records for %d refusals:\n%s", len(lines), sent, raw)
	}
	for i, line := range lines {
		var rec struct{ Outcome, Fence string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("audit line %d: %v: %q", i, err, line)
			continue
		}
		if rec.Outcome == "accepted" || (rec.Fence != fence && rec.Fence != denied) {
			t.Errorf("audit line %d: %q", i, line)
		}
	}
	if n := count(t, c, table); n != 0 {
		t.Errorf("%d rows written by refused requests", n)
	}
}

// TestUnreadableWritesMoveNothing: a write refused because it could not
// be read never reaches the term decision, so the token it carries moves
// nothing. Sent with the highest token there is, to an etcd fence and to
// a monotonic one (where a verified token becomes the term), neither the
// leader's next write nor a lower monotonic token is refused afterwards.
// And unreadable writes to many fences nobody leads add no series of
// their own to the metrics.
func TestUnreadableWritesMoveNothing(t *testing.T) {
	routes, err := election.ParseRoutes("mono-*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	r := startReplicaWith(t, replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), routes: routes})
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	mono := "mono-" + fence
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)

	const highest = "9223372036854775807"
	bodies := map[string]string{
		"malformed json":      `{"statements":[{"sql":"INSERT INTO ` + table + `(worker, token) VALUES ('m', 1)"}`,
		"unknown field":       `{"statements":[{"sql":"SELECT 1"}],"pipeline":true}`,
		"param beyond 2^53":   `{"statements":[{"sql":"INSERT INTO ` + table + `(worker, token) VALUES ('m', $1)","params":[18014398509481985]}]}`,
		"body over the limit": `{"statements":[{"sql":"SELECT 1 -- ` + strings.Repeat("x", 80<<10) + `"}]}`,
	}
	for _, f := range []string{fence, mono} {
		for name, body := range bodies {
			got := rtDo(t, http.MethodPost, r.url+"/v1/fences/"+f+"/sql", jsonHdr("Fencing-Token", highest), strings.NewReader(body), 0)
			if got.code != http.StatusBadRequest || got.reason != "INVALID_REQUEST" {
				t.Errorf("%s to %s with token %s: got %d %s, want 400 INVALID_REQUEST", name, f, highest, got.code, got.reason)
			}
		}
	}
	if got := execHTTP(t, r, fence, l.token, insert(table, "leader", l.token)); got.code != http.StatusOK {
		t.Errorf("the leader of %s after the unreadable writes: got %d %v", fence, got.code, got.body)
	}
	if got := execHTTP(t, r, mono, 5, insert(table, "mono", 5)); got.code != http.StatusOK {
		t.Errorf("token 5 on %s after unreadable writes with token %s: got %d %v (the term moved)", mono, highest, got.code, got.body)
	}

	const unknown = 40
	for i := range unknown {
		got := rtDo(t, http.MethodPost, fmt.Sprintf("%s/v1/fences/%s-nobody-%d/sql", r.url, fence, i), jsonHdr("Fencing-Token", "1"), strings.NewReader("{"), 0)
		if got.code != http.StatusBadRequest {
			t.Fatalf("unreadable write %d: got %d", i, got.code)
		}
	}
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "fence" && strings.Contains(lp.GetValue(), "-nobody-") {
					t.Errorf("%s has a series of its own for fence %q, which nobody leads", mf.GetName(), lp.GetValue())
				}
			}
		}
	}
	if got := metricValue(t, r, "fencegate_rejections_total", map[string]string{"fence": proxy.OtherFences, "reason": "invalid_request"}); got < unknown {
		t.Errorf(`fencegate_rejections_total{fence=%q,reason="invalid_request"}: got %v, want at least %d`, proxy.OtherFences, got, unknown)
	}
}
