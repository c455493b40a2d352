package api_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fencegate/fencegate/api"
	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/redis"
)

// metricValue returns the value of the series of metric name with labels,
// or -1 when there is none.
func metricValue(t *testing.T, r *replica, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// seriesCount returns how many series metric name has.
func seriesCount(t *testing.T, r *replica, name string) int {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

const maxInt64 = "9223372036854775807"

// A caller who raises a fence's mark in one backend to 2^63-1 (by SQL, or
// by writing the Redis token key) makes that backend refuse the leader. The
// replica must not take that mark into memory: once the mark is repaired
// the leader writes again, and the other backend never refused it.
func TestPoisonedHighWater(t *testing.T) {
	for _, poisoned := range []string{proxy.BackendPostgres, proxy.BackendRedis} {
		t.Run(poisoned, func(t *testing.T) {
			r := startReplica(t, true)
			c := db(t)
			rc := rdb(t)
			table := ledgerTable(t, c)
			fence := fenceName(t)
			l := campaign(t, newEtcdClient(t), fence, "worker-1")
			waitTerm(t, r, fence, l.token)
			ctx := t.Context()

			write := map[string]func() httpReply{
				proxy.BackendPostgres: func() httpReply { return execHTTP(t, r, fence, l.token, insert(table, "leader", l.token)) },
				proxy.BackendRedis: func() httpReply {
					return redisHTTP(t, r, fence, l.token, fmt.Sprintf(`{"commands":[["RPUSH","{%s}:ledger","leader"]]}`, fence))
				},
			}
			setMark := func(mark string) {
				t.Helper()
				var err error
				if poisoned == proxy.BackendPostgres {
					_, err = c.Exec(ctx, "UPDATE fencegate.fences SET token = $2 WHERE name = $1", fence, mark)
				} else {
					err = rc.Set(ctx, redis.TokenKey(fence), mark, 0).Err()
				}
				if err != nil {
					t.Fatalf("set %s mark to %s: %v", poisoned, mark, err)
				}
			}
			other := proxy.BackendRedis
			if poisoned == proxy.BackendRedis {
				other = proxy.BackendPostgres
			}
			for _, b := range []string{poisoned, other} {
				if got := write[b](); got.code != http.StatusOK {
					t.Fatalf("leader's first %s write: got HTTP %d %v, want 200", b, got.code, got.body)
				}
			}

			setMark(maxInt64)
			// The leader's write reaches the backend, which refuses it and
			// reports the poisoned mark.
			got := write[poisoned]()
			wantRefusal(t, got, http.StatusConflict, "STALE_TOKEN")
			if got.metadata["highWater"] != maxInt64 {
				t.Fatalf("got highWater %v, want %s from the poisoned backend", got.metadata["highWater"], maxInt64)
			}
			suspect := func(b string) float64 {
				return metricValue(t, r, "fencegate_suspect_high_water_total", map[string]string{"backend": b})
			}
			if got := suspect(poisoned); got != 1 {
				t.Errorf("fencegate_suspect_high_water_total{backend=%q}: got %v, want 1", poisoned, got)
			}
			if got := suspect(other); got != 0 {
				t.Errorf("fencegate_suspect_high_water_total{backend=%q}: got %v, want 0", other, got)
			}
			if !strings.Contains(r.logs.String(), "above every known term") {
				t.Errorf("got no log line about the suspect mark, want one")
			}

			// The other backend is untouched.
			if got := write[other](); got.code != http.StatusOK {
				t.Fatalf("leader's %s write after %s was poisoned: got HTTP %d %v, want 200", other, poisoned, got.code, got.body)
			}
			// Once the mark is repaired, nothing in memory refuses the leader.
			setMark(strconv.FormatInt(l.token, 10))
			if got := write[poisoned](); got.code != http.StatusOK {
				t.Fatalf("leader's %s write after the mark was repaired: got HTTP %d %v, want 200", poisoned, got.code, got.body)
			}
			if got := metricValue(t, r, "fencegate_fence_high_water", map[string]string{"fence": fence}); got != float64(l.token) {
				t.Errorf("fencegate_fence_high_water{fence=%q}: got %v, want %d", fence, got, l.token)
			}
		})
	}
}

// Refusals for names the replica knows nothing of share one series, however
// many names are tried; known fences keep theirs.
func TestRejectionSeriesBounded(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	if got := execHTTP(t, r, fence, l.token, insert(table, "w", l.token)); got.code != 200 {
		t.Fatalf("leader: got HTTP %d %v, want 200", got.code, got.body)
	}
	wantRefusal(t, execHTTP(t, r, fence, l.token-1, insert(table, "w", l.token)), 409, "STALE_TOKEN")

	const names = 2000
	for i := range names {
		name := fmt.Sprintf("%s-x%d", fence, i)
		switch i % 4 {
		case 0: // no token, SQL
			wantRefusal(t, execHTTP(t, r, name, 0, insert(table, "w", 1)), 400, "MISSING_TOKEN")
		case 1: // no token, Redis
			wantRefusal(t, redisHTTP(t, r, name, 0, `{"commands":[["GET","{x}:k"]]}`), 400, "MISSING_TOKEN")
		case 2: // a forged token: verified with etcd, unknown
			wantRefusal(t, execHTTP(t, r, name, 77, insert(table, "w", 77)), 400, "UNKNOWN_TERM")
		case 3: // an invalid name
			wantRefusal(t, doHTTP(t, http.MethodPost, r.url+"/v1/fences/_"+name+"/sql", "1", sqlBody(insert(table, "w", 1))), 400, "INVALID_REQUEST")
		}
	}
	// _other: missing_token, unknown_term, invalid_request; the fence's
	// stale_token.
	if got, want := seriesCount(t, r, "fencegate_rejections_total"), 4; got != want {
		t.Errorf("fencegate_rejections_total: got %d series after refusals for %d names, want %d", got, names, want)
	}
	for _, tc := range []struct {
		fence, reason string
		want          float64
	}{
		{proxy.OtherFences, "missing_token", names / 2},
		{proxy.OtherFences, "unknown_term", names / 4},
		{proxy.OtherFences, "invalid_request", names / 4},
		{fence, "stale_token", 1},
	} {
		if got := metricValue(t, r, "fencegate_rejections_total", map[string]string{"fence": tc.fence, "reason": tc.reason}); got != tc.want {
			t.Errorf("fencegate_rejections_total{fence=%q,reason=%q}: got %v, want %v", tc.fence, tc.reason, got, tc.want)
		}
	}
	if got := seriesCount(t, r, "fencegate_fence_high_water"); got != 1 {
		t.Errorf("fencegate_fence_high_water: got %d series, want 1 (the one fence written)", got)
	}
}

// Each token above every known term costs an etcd read; per fence, only a
// burst of them is served, then writes are refused with OVERLOADED.
func TestVerificationRateLimited(t *testing.T) {
	cfg := proxy.DefaultConfig()
	cfg.VerifyBurst = 3
	cfg.VerifyRate = 0.001 // no refill within the test
	r := startReplicaWith(t, replicaConfig{watch: true, proxy: cfg, http: api.DefaultHTTPServerConfig()})
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	cli := newEtcdClient(t)
	l := campaign(t, cli, fence, "worker-1")
	waitTerm(t, r, fence, l.token)

	for i := range 10 {
		forged := l.token + 1000 + int64(i)
		got := execHTTP(t, r, fence, forged, insert(table, "mallory", forged))
		if i < cfg.VerifyBurst {
			wantRefusal(t, got, 400, "UNKNOWN_TERM")
		} else {
			wantRefusal(t, got, http.StatusTooManyRequests, "OVERLOADED")
		}
	}
	// Over gRPC too, RESOURCE_EXHAUSTED.
	ctx := metadata.AppendToOutgoingContext(t.Context(), "fencing-token", fmt.Sprint(l.token+5000))
	_, err := r.grpc.Redis(ctx, &fencegatev1.RedisRequest{Fence: fence, Commands: []*structpb.ListValue{{Values: []*structpb.Value{
		structpb.NewStringValue("SET"), structpb.NewStringValue("{" + fence + "}:k"), structpb.NewStringValue("v"),
	}}}})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || errorReason(st) != "OVERLOADED" {
		t.Errorf("gRPC: got %v %s, want ResourceExhausted OVERLOADED", st.Code(), errorReason(st))
	}

	// Another fence has its own budget.
	other := fence + "-other"
	wantRefusal(t, execHTTP(t, r, other, 4242, insert(table, "mallory", 4242)), 400, "UNKNOWN_TERM")
	// The leader needs no verification and is not held back.
	if got := execHTTP(t, r, fence, l.token, insert(table, "leader", l.token)); got.code != 200 {
		t.Fatalf("leader after the flood: got HTTP %d %v, want 200", got.code, got.body)
	}
	var mallory int
	if err := c.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE worker = 'mallory'").Scan(&mallory); err != nil {
		t.Fatal(err)
	}
	if mallory != 0 {
		t.Errorf("got %d rows of forged writes, want 0", mallory)
	}
	if got := metricValue(t, r, "fencegate_requests_total", map[string]string{"backend": "postgres", "outcome": "overloaded"}); got != 7 {
		t.Errorf(`fencegate_requests_total{backend="postgres",outcome="overloaded"}: got %v, want 7`, got)
	}
}

func errorReason(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == api.Domain {
			return info.Reason
		}
	}
	return ""
}

// A JSON integer beyond 2^53 would reach PostgreSQL and Redis rounded, as a
// double; it is refused, and the same value sent as a string is stored
// exactly.
func TestExactIntegersHTTP(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	rc := rdb(t)
	fence := fenceName(t)
	table := strings.ToLower(strings.ReplaceAll(fence, "-", "_"))
	ctx := t.Context()
	if _, err := c.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s(id text primary key, n bigint, x float8)`, table)); err != nil {
		t.Fatal(err)
	}
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	ins := func(id, n string) string {
		return fmt.Sprintf(`{"sql":"INSERT INTO %s(id, n) VALUES ($1, $2) RETURNING n","params":[%q,%s]}`, table, id, n)
	}

	got := execHTTP(t, r, fence, l.token, ins("number", "12345678901234567"))
	wantRefusal(t, got, 400, "INVALID_REQUEST")
	if msg, _ := got.body["message"].(string); !strings.Contains(msg, "statements[0].params[1]") || !strings.Contains(msg, "12345678901234567") {
		t.Errorf("got message %q, want it to name statements[0].params[1] and the number", msg)
	}
	for _, n := range []string{"-12345678901234567", "9007199254740992", "1.2345678901234567e16", "1e400"} {
		wantRefusal(t, execHTTP(t, r, fence, l.token, ins("number", n)), 400, "INVALID_REQUEST")
	}
	if n := count(t, c, table); n != 0 {
		t.Fatalf("got %d rows after refused writes, want 0", n)
	}
	var hw int64
	if err := c.QueryRow(ctx, "SELECT token FROM fencegate.fences WHERE name = $1", fence).Scan(&hw); !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("fence row: got high-water %d (err %v), want none: a refused write raised the fence", hw, err)
	}

	got = execHTTP(t, r, fence, l.token, ins("string", `"12345678901234567"`), ins("largest", "9007199254740991"))
	if got.code != 200 {
		t.Fatalf("as a string: got HTTP %d %v, want 200", got.code, got.body)
	}
	// Integers beyond 2^53 come back as strings.
	res, _ := got.body["results"].([]any)
	if s := fmt.Sprint(res[0].(map[string]any)["rows"], res[1].(map[string]any)["rows"]); s != "[[12345678901234567]] [[9.007199254740991e+15]]" {
		t.Errorf("RETURNING: got %s, want the values exactly", s)
	}
	for id, want := range map[string]int64{"string": 12345678901234567, "largest": 9007199254740991} {
		var n int64
		if err := c.QueryRow(ctx, "SELECT n FROM "+table+" WHERE id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("row %s: got n = %d, want %d", id, n, want)
		}
	}

	// Redis: the number is refused, the string stored as sent, and other
	// numbers formatted exactly.
	key := func(k string) string { return "{" + fence + "}:" + k }
	wantRefusal(t, redisHTTP(t, r, fence, l.token, fmt.Sprintf(`{"commands":[["SET",%q,12345678901234567]]}`, key("big"))), 400, "INVALID_REQUEST")
	if err := rc.Get(ctx, key("big")).Err(); !errors.Is(err, goredis.Nil) {
		t.Errorf("GET %s after the refused write: got %v, want nil", key("big"), err)
	}
	got = redisHTTP(t, r, fence, l.token, fmt.Sprintf(`{"commands":[["SET",%q,"12345678901234567"],["SET",%q,7],["SET",%q,-0],["SET",%q,0.5],["SET",%q,1e-7],["SET",%q,1e15]]}`,
		key("big"), key("seven"), key("zero"), key("half"), key("tiny"), key("e15")))
	if got.code != 200 {
		t.Fatalf("Redis: got HTTP %d %v, want 200", got.code, got.body)
	}
	for k, want := range map[string]string{"big": "12345678901234567", "seven": "7", "zero": "0", "half": "0.5", "tiny": "0.0000001", "e15": "1000000000000000"} {
		if v, err := rc.Get(ctx, key(k)).Result(); err != nil || v != want {
			t.Errorf("GET %s: got %q (%v), want %q", key(k), v, err, want)
		}
	}
}

// Over gRPC, params and arguments are doubles already: an integral one
// beyond 2^53 may be a rounded integer and is refused.
func TestExactIntegersGRPC(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "fencing-token", fmt.Sprint(l.token))
	big := structpb.NewNumberValue(12345678901234567)
	nested, _ := structpb.NewValue(map[string]any{"a": []any{1.0, 12345678901234567.0}})

	for _, tc := range []struct {
		name, sql string
		param     *structpb.Value
	}{
		{"number", "INSERT INTO " + table + "(worker, token) VALUES ($1::text, $2::bigint)", big},
		{"nested", "INSERT INTO " + table + "(worker, token) VALUES ($1::text, jsonb_array_length($2::jsonb->'a'))", nested},
	} {
		name := tc.name
		_, err := r.grpc.Exec(ctx, &fencegatev1.ExecRequest{Fence: fence, Statements: []*fencegatev1.Statement{{
			Sql:    tc.sql,
			Params: []*structpb.Value{structpb.NewStringValue(name), tc.param},
		}}})
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || errorReason(st) != "INVALID_REQUEST" || !strings.Contains(st.Message(), "statement 0 param 1") {
			t.Errorf("%s param: got %v %s %q, want InvalidArgument INVALID_REQUEST naming statement 0 param 1", name, st.Code(), errorReason(st), st.Message())
		}
	}
	// Infinity is no integer: a float8 param takes it.
	if _, err := r.grpc.Exec(ctx, &fencegatev1.ExecRequest{Fence: fence, Statements: []*fencegatev1.Statement{{
		Sql: "SELECT $1::float8", Params: []*structpb.Value{structpb.NewNumberValue(math.Inf(1))},
	}}}); err != nil {
		t.Errorf("infinite float8 param: got %v, want it accepted", err)
	}
	cmd := func(vs ...*structpb.Value) *structpb.ListValue { return &structpb.ListValue{Values: vs} }
	s := structpb.NewStringValue
	for _, v := range []*structpb.Value{big, structpb.NewNumberValue(-1 << 60)} {
		_, err := r.grpc.Redis(ctx, &fencegatev1.RedisRequest{Fence: fence, Commands: []*structpb.ListValue{cmd(s("SET"), s("{"+fence+"}:k"), v)}})
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "command 0 argument 2") {
			t.Errorf("Redis argument %v: got %v %q, want InvalidArgument naming command 0 argument 2", v.GetNumberValue(), st.Code(), st.Message())
		}
	}
	if n := count(t, c, table); n != 0 {
		t.Errorf("got %d rows after refused writes, want 0", n)
	}
}

// A client that sends its body a byte a second is cut off after the read
// timeout instead of holding a connection and a goroutine for as long as it
// likes.
func TestSlowlorisCutOff(t *testing.T) {
	cfg := api.DefaultHTTPServerConfig()
	cfg.ReadHeaderTimeout = time.Second
	cfg.ReadTimeout = 2 * time.Second
	r := startReplicaWith(t, replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: cfg})
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := sqlBody(`{"sql":"SELECT 1"}`)
	start := time.Now()
	if _, err := fmt.Fprintf(conn, "POST /v1/fences/slow/sql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nFencing-Token: 1\r\nContent-Length: %d\r\n\r\n", len(body)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	sent := make(chan int, 1)
	go func() {
		n := 0
		defer func() { sent <- n }()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for ; n < len(body); n++ {
			if _, err := conn.Write([]byte{body[n]}); err != nil {
				return
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	// The server answers (or drops the connection) once the read timeout
	// has passed; without one it waits for the whole body, 30 s away.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	elapsed := time.Since(start)
	close(done)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	n := <-sent
	if elapsed > cfg.ReadTimeout+2*time.Second || n >= len(body) {
		t.Fatalf("slow body: cut off after %v having sent %d of %d bytes (%v), want cut off within %v of a %v read timeout",
			elapsed.Round(time.Millisecond), n, len(body), err, 2*time.Second, cfg.ReadTimeout)
	}
	if err == nil && resp.StatusCode < 400 {
		t.Errorf("slow body: got HTTP %d, want an error or a closed connection", resp.StatusCode)
	}
}
