package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fencegate/fencegate/api"
	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/audit"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/proxy/redis"
)

// rt12Raw is a client codec that sends fixed bytes as the request,
// whatever the message: what a client in another language, or a broken
// one, may put on the wire.
type rt12Raw struct{ send []byte }

func (c rt12Raw) Marshal(any) ([]byte, error)      { return c.send, nil }
func (rt12Raw) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }
func (rt12Raw) Name() string                       { return "proto" }

// TestRedTeam12GRPCMalformedMessage: API.md answers a malformed request
// with INVALID_REQUEST (INVALID_ARGUMENT), and SECURITY.md makes "a write
// that could not be read" a decision of the pipeline (authorized first,
// counted, audited), naming one exception only: a message over twice
// --max-body-bytes. A gRPC request whose message does not parse — a
// string field holding invalid UTF-8 (a SQL text in Latin-1, say), or
// truncated wire data — was answered by grpc-go's transport with
// INTERNAL ("grpc: failed to unmarshal the received message"), no
// ErrorInfo, never reaching fencegate: a server-bug code for the client's
// own error, which HTTP/JSON clients get as 400 INVALID_REQUEST for the
// same mistake. Served with api.ServerOptions, as serve does, it is
// refused INVALID_REQUEST, a write through the pipeline; nothing is
// written, and a well-formed request is served as before.
func TestRedTeam12GRPCMalformedMessage(t *testing.T) {
	fence := fenceName(t)
	denied := fence + "-denied"
	p, err := policy.Parse([]byte(fmt.Sprintf(`rules:
  - name: all
    principals: ["*"]
    fences: ["*"]
    actions: [sql.write, redis.write, fence.read, fence.admin]
  - name: frozen
    effect: deny
    principals: ["*"]
    fences: [%q]
    actions: [sql.write, redis.write]
`, denied)))
	if err != nil {
		t.Fatal(err)
	}
	var trail auditTrail
	gc, reg, w := rt12Server(t, p, &trail)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitFor(t, "term", func() bool { return w.Term(fence).Rev == l.token })

	field := func(b []byte, n protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), v)
	}
	withFence := func(f string) []byte { return field(nil, 1, []byte(f)) }
	stmt := func(sql string) []byte { return field(nil, 1, []byte(sql)) }
	// A ListValue holding one Value whose string_value (3) is sql.
	command := func(arg string) []byte { return field(nil, 1, field(nil, 3, []byte(arg))) }
	latin1 := "SELECT 'caf\xe9'"

	gctx := metadata.AppendToOutgoingContext(t.Context(), "fencing-token", strconv.FormatInt(l.token, 10))
	call := func(body []byte, rpc func(ctx context.Context, opt grpc.CallOption) error) error {
		ctx, cancel := context.WithTimeout(gctx, 5*time.Second)
		defer cancel()
		return rpc(ctx, grpc.ForceCodec(rt12Raw{body}))
	}
	exec := func(ctx context.Context, opt grpc.CallOption) error {
		_, err := gc.Exec(ctx, &fencegatev1.ExecRequest{}, opt)
		return err
	}
	redisCall := func(ctx context.Context, opt grpc.CallOption) error {
		_, err := gc.Redis(ctx, &fencegatev1.RedisRequest{}, opt)
		return err
	}
	writes := []struct {
		name    string
		body    []byte
		rpc     func(context.Context, grpc.CallOption) error
		fence   string // as recorded
		backend string
		code    codes.Code
		reason  string
	}{
		{
			"SQL text not UTF-8", field(field(withFence(fence), 2, stmt("SELECT 1")), 2, stmt(latin1)),
			exec, fence, "postgres", codes.InvalidArgument, "INVALID_REQUEST",
		},
		{
			"truncated message", withFence(fence)[:len(withFence(fence))-2],
			exec, "", "postgres", codes.InvalidArgument, "INVALID_REQUEST",
		},
		{
			"truncated statement", func() []byte { b := field(withFence(fence), 2, stmt("SELECT 1")); return b[:len(b)-1] }(),
			exec, fence, "postgres", codes.InvalidArgument, "INVALID_REQUEST",
		},
		{
			"Redis argument not UTF-8", field(withFence(fence), 2, command("GET\xff")),
			redisCall, fence, "redis", codes.InvalidArgument, "INVALID_REQUEST",
		},
		{
			"not UTF-8, to a fence the policy refuses", field(withFence(denied), 2, stmt(latin1)),
			exec, denied, "postgres", codes.PermissionDenied, "NOT_AUTHORIZED",
		},
	}
	counted := map[[2]string]int{}
	for _, tc := range writes {
		err := call(tc.body, tc.rpc)
		if status.Code(err) != tc.code || rtReason(err) != tc.reason {
			t.Errorf("%s: got %v (reason %q), want %v with reason %s", tc.name, err, rtReason(err), tc.code, tc.reason)
		}
		if tc.reason == "INVALID_REQUEST" && !strings.Contains(status.Convert(err).Message(), "cannot read the request message: ") {
			t.Errorf("%s: got message %q, want it to say the message cannot be read, and why", tc.name, status.Convert(err).Message())
		}
		counted[[2]string{tc.backend, strings.ToLower(tc.reason)}]++
	}
	for k, n := range counted {
		if got := metricValue(t, &replica{reg: reg}, "fencegate_requests_total", map[string]string{"backend": k[0], "outcome": k[1]}); got != float64(n) {
			t.Errorf("fencegate_requests_total{backend=%q,outcome=%q}: got %v, want %d", k[0], k[1], got, n)
		}
	}
	trail.mu.Lock()
	recs := append([]audit.Record(nil), trail.recs...)
	trail.mu.Unlock()
	if len(recs) != len(writes) {
		t.Errorf("audit: got %d records for %d refused writes: %+v", len(recs), len(writes), recs)
	}
	for i := range min(len(recs), len(writes)) {
		if w := writes[i]; recs[i].Outcome != w.reason || recs[i].Fence != w.fence || recs[i].Protocol != proxy.ProtocolGRPC {
			t.Errorf("audit record %d (%s): got outcome %q, fence %q, protocol %q; want %s, %q, grpc",
				i, w.name, recs[i].Outcome, recs[i].Fence, recs[i].Protocol, w.reason, w.fence)
		}
	}

	// Reads and resets are refused too; a partial reset message resets nothing.
	for _, tc := range []struct {
		name string
		rpc  func(context.Context, grpc.CallOption) error
	}{
		{"GetFence", func(ctx context.Context, opt grpc.CallOption) error {
			_, err := gc.GetFence(ctx, &fencegatev1.GetFenceRequest{}, opt)
			return err
		}},
		{"ResetFence", func(ctx context.Context, opt grpc.CallOption) error {
			_, err := gc.ResetFence(ctx, &fencegatev1.ResetFenceRequest{}, opt)
			return err
		}},
	} {
		err := call(append(withFence(fence), 0x10), tc.rpc) // field 2, varint, cut off
		if status.Code(err) != codes.InvalidArgument || rtReason(err) != "INVALID_REQUEST" {
			t.Errorf("%s: got %v (reason %q), want INVALID_ARGUMENT with reason INVALID_REQUEST", tc.name, err, rtReason(err))
		}
	}

	// Nothing was written; a well-formed write goes through.
	f, err := gc.GetFence(t.Context(), &fencegatev1.GetFenceRequest{Fence: fence})
	if err != nil || f.GetHighWater() != 0 {
		t.Fatalf("after the refusals: got high water %d (%v), want 0", f.GetHighWater(), err)
	}
	if _, err := gc.Exec(gctx, &fencegatev1.ExecRequest{Fence: fence, Statements: []*fencegatev1.Statement{{Sql: "SELECT 1"}}}); err != nil {
		t.Fatalf("a well-formed Exec: %v", err)
	}
	if f, err := gc.GetFence(t.Context(), &fencegatev1.GetFenceRequest{Fence: fence}); err != nil || f.GetHighWater() != uint64(l.token) {
		t.Fatalf("after a well-formed Exec: got high water %d (%v), want %d", f.GetHighWater(), err, l.token)
	}
}

// rt12Server serves a gateway over gRPC with api.ServerOptions, as serve
// builds it (the replica harness uses grpc-go's defaults).
func rt12Server(t *testing.T, p proxy.Authorizer, alog proxy.AuditLog) (fencegatev1.GatewayClient, *prometheus.Registry, *election.Watcher) {
	t.Helper()
	w, err := election.NewWatcher(newEtcdClient(t), election.WatcherConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "watch synced", w.Synced)
	pg, err := postgres.Open(t.Context(), pgDSN, postgres.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	if err := pg.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	rd, err := redis.Open(t.Context(), redisAddr, redis.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	reg := prometheus.NewRegistry()
	gw, err := proxy.New(proxy.DefaultConfig(), proxy.Options{
		Terms: w, Postgres: pg, Redis: rd, Policy: p, Audit: alog,
		Logger: slog.New(slog.DiscardHandler), Registerer: reg, Protocol: api.ProtocolOf,
	})
	if err != nil {
		t.Fatal(err)
	}
	const maxBody = 64 << 10
	gs := grpc.NewServer(api.ServerOptions(maxBody)...)
	api.NewServer(gw, maxBody).Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-served })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return fencegatev1.NewGatewayClient(conn), reg, w
}
