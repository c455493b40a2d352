package main

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
)

// TestRedTeam2MetricsMatchClients drives known answers over every way in
// (accepted, stale, unknown term, statement failed, command not allowed,
// bad tokens, hostile fence names) and checks that
// fencegate_requests_total{backend,outcome} and
// fencegate_rejections_total{fence,reason} moved by exactly what the
// clients saw, that the label names are API.md's, and that hostile fence
// names do not become label values.
func TestRedTeam2MetricsMatchClients(t *testing.T) {
	e := newRT2Env(t)
	p := e.startServe(t)
	tok, _ := e.lead(t, "rt", "w1")
	ctx := t.Context()
	before := rt2Metrics(t, "http://"+p.metr+"/metrics")

	// seen[backend][outcome label] is what the clients were answered.
	seen := map[string]map[string]int{"postgres": {}, "redis": {}}
	byFence := map[string]int{} // fence label/reason → count, refusals only
	note := func(backend, outcome, fenceLabel string) {
		seen[backend][outcome]++
		if outcome != "accepted" {
			byFence[fenceLabel+"/"+outcome]++
		}
	}
	lower := func(reason string) string { return strings.ToLower(reason) }

	// HTTP → PostgreSQL
	httpSQL := func(fence, token, id string) (rt2Outcome, string) {
		body := fmt.Sprintf(`{"statements":[{"sql":"INSERT INTO rt2(id) VALUES ($1)","params":[%q]}]}`, id)
		out, reason, detail := rt2HTTPPost(p.http, "/v1/fences/"+fence+"/sql", token, body)
		if out == rt2Unknown {
			t.Fatalf("HTTP %s: unknown answer %s", fence, detail)
		}
		return out, reason
	}
	T := strconv.FormatUint(tok, 10)
	for i := range 5 {
		if out, r := httpSQL("rt", T, fmt.Sprint("m-h-", i)); out != rt2Acked {
			t.Fatalf("accepted write refused: %s", r)
		}
		note("postgres", "accepted", "rt")
	}
	for _, c := range []struct{ token, id, want string }{
		{strconv.FormatUint(tok-1, 10), "m-stale", "STALE_TOKEN"},
		{strconv.FormatUint(tok+1000, 10), "m-unk", "UNKNOWN_TERM"},
		{T, "m-h-0", "STATEMENT_FAILED"}, // duplicate key
		{"abc", "m-inv", "INVALID_TOKEN"},
		{"", "m-miss", "MISSING_TOKEN"},
	} {
		_, r := httpSQL("rt", c.token, c.id)
		if r != c.want {
			t.Fatalf("HTTP token %q: got %s, want %s", c.token, r, c.want)
		}
		note("postgres", lower(r), "rt")
	}

	// gRPC → Redis
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gc := fencegatev1.NewGatewayClient(conn)
	grpcRedis := func(token string, args ...any) (rt2Outcome, string) {
		cmd, _ := structpb.NewList(args)
		_, err := gc.Redis(metadata.AppendToOutgoingContext(ctx, "fencing-token", token), &fencegatev1.RedisRequest{Fence: "rt", Commands: []*structpb.ListValue{cmd}})
		out, reason, detail := rt2GRPCAnswer(err)
		if out == rt2Unknown {
			t.Fatalf("gRPC: unknown answer %s", detail)
		}
		return out, reason
	}
	for i := range 4 {
		if out, r := grpcRedis(T, "SET", fmt.Sprint("{rt}:m-g-", i), "1"); out != rt2Acked {
			t.Fatalf("gRPC accepted write refused: %s", r)
		}
		note("redis", "accepted", "rt")
	}
	for _, c := range []struct {
		token string
		args  []any
		want  string
	}{
		{strconv.FormatUint(tok-1, 10), []any{"SET", "{rt}:m-gs", "1"}, "STALE_TOKEN"},
		{T, []any{"FLUSHALL"}, "COMMAND_NOT_ALLOWED"},
	} {
		_, r := grpcRedis(c.token, c.args...)
		if r != c.want {
			t.Fatalf("gRPC %v: got %s, want %s", c.args, r, c.want)
		}
		note("redis", lower(r), "rt")
	}

	// PostgreSQL listener
	pgc := func(fence string, token uint64) *pgx.Conn {
		c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://app@%s/postgres?sslmode=disable&fencegate.fence=%s&fencegate.token=%d", p.pg, fence, token))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.WithoutCancel(ctx)) })
		return c
	}
	good := pgc("rt", tok)
	// pgx prepares the statement on its first Exec (Parse, Describe,
	// Sync): a fenced transaction of its own, as parse analysis may run
	// client code, answered and counted accepted.
	note("postgres", "accepted", "rt")
	for i := range 3 {
		if _, err := good.Exec(ctx, "INSERT INTO rt2(id) VALUES ($1)", fmt.Sprint("m-p-", i)); err != nil {
			t.Fatal(err)
		}
		note("postgres", "accepted", "rt")
	}
	stale := pgc("rt", tok-1)
	for i := range 2 {
		_, err := stale.Exec(ctx, "INSERT INTO rt2(id) VALUES ($1)", fmt.Sprint("m-ps-", i))
		if out, code, msg := rt2PgAnswer(err); out != rt2Refused || code != "FG001" {
			t.Fatalf("pgwire stale: got %v %s %s", out, code, msg)
		}
		note("postgres", "stale_token", "rt")
	}

	// RESP listener
	rc := func(fence string, token uint64) *goredis.Client {
		c := goredis.NewClient(&goredis.Options{
			Addr: p.resp, Username: fence, Password: strconv.FormatUint(token, 10), MaxRetries: -1, PoolSize: 1,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
		t.Cleanup(func() { c.Close() })
		return c
	}
	rgood := rc("rt", tok)
	for i := range 4 {
		if err := rgood.Set(ctx, fmt.Sprint("{rt}:m-r-", i), "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		note("redis", "accepted", "rt")
	}
	rstale := rc("rt", tok-1)
	for i := range 2 {
		err := rstale.Set(ctx, fmt.Sprint("{rt}:m-rs-", i), "1", 0).Err()
		if out, r, msg := rt2RedisAnswer(err); out != rt2Refused || r != "STALE_TOKEN" {
			t.Fatalf("resp stale: %v %s %s", out, r, msg)
		}
		note("redis", "stale_token", "rt")
	}

	// Hostile fence names: many distinct ones, over every way in. Each
	// refusal is one request; none may become a label value.
	const hostile = 60
	for i := range hostile {
		name := fmt.Sprintf("evil-%d-%s", i, strings.Repeat("x", i))
		_, r := httpSQL(name, "7", "m-evil")
		note("postgres", lower(r), "_other")
		if _, r := grpcRedis7(ctx, t, gc, name+"g"); r != "" {
			note("redis", lower(r), "_other")
		}
		ec := rc(name+"r", 7)
		err := ec.Set(ctx, "{"+name+"r}:k", "1", 0).Err()
		if out, r, msg := rt2RedisAnswer(err); out == rt2Refused {
			note("redis", lower(r), "_other")
		} else {
			t.Fatalf("resp hostile: %v %s", out, msg)
		}
		ec.Close()
		pc, err := pgx.Connect(ctx, fmt.Sprintf("postgres://app@%s/postgres?sslmode=disable&fencegate.fence=%sp&fencegate.token=7", p.pg, name))
		if err != nil {
			t.Fatal(err)
		}
		_, err = pc.Exec(ctx, "INSERT INTO rt2(id) VALUES ('m-evil')")
		if out, code, msg := rt2PgAnswer(err); out == rt2Refused && code == "FG003" {
			note("postgres", "unknown_term", "_other")
		} else {
			t.Fatalf("pgwire hostile: %v %s %s", out, code, msg)
		}
		pc.Close(ctx)
	}
	// Names that are not fence names at all.
	for _, name := range []string{strings.Repeat("y", 300), "a%20b", "%2e%2e"} {
		_, r := httpSQL(name, T, "m-bad")
		note("postgres", lower(r), "_other")
	}

	after := rt2Metrics(t, "http://"+p.metr+"/metrics")
	for _, backend := range []string{"postgres", "redis"} {
		outcomes := map[string]bool{}
		for o := range seen[backend] {
			outcomes[o] = true
		}
		for k := range after {
			if m := regexp.MustCompile(`^fencegate_requests_total\{backend="` + backend + `",outcome="([a-z_]+)"\}$`).FindStringSubmatch(k); m != nil {
				outcomes[m[1]] = true
			}
		}
		var names []string
		for o := range outcomes {
			names = append(names, o)
		}
		sort.Strings(names)
		for _, o := range names {
			key := fmt.Sprintf(`fencegate_requests_total{backend=%q,outcome=%q}`, backend, o)
			got := after[key] - before[key]
			if int(got) != seen[backend][o] {
				t.Errorf("%s: moved by %v, the clients were answered %d", key, got, seen[backend][o])
			}
		}
	}
	labels := map[string]bool{}
	for k := range after {
		if m := regexp.MustCompile(`^fencegate_rejections_total\{fence="([^"]*)",reason="([a-z_]+)"\}$`).FindStringSubmatch(k); m != nil {
			labels[m[1]] = true
			got := after[k] - before[k]
			if int(got) != byFence[m[1]+"/"+m[2]] {
				t.Errorf("%s: moved by %v, the clients were refused %d times", k, got, byFence[m[1]+"/"+m[2]])
			}
		}
	}
	for k, n := range byFence {
		f, r, _ := strings.Cut(k, "/")
		if _, ok := after[fmt.Sprintf(`fencegate_rejections_total{fence=%q,reason=%q}`, f, r)]; !ok {
			t.Errorf("no fencegate_rejections_total{fence=%q,reason=%q}; the clients were refused %d times", f, r, n)
		}
	}
	if len(labels) > 2 {
		t.Errorf("fence label values after %d hostile names: %d (%v), want rt and _other only", hostile, len(labels), keysOf(labels, 5))
	}
	// Series count of every family with a fence or election label.
	fam := map[string]int{}
	for k := range after {
		if strings.Contains(k, `fence="`) || strings.Contains(k, `election="`) {
			fam[k[:strings.IndexByte(k, '{')]]++
		}
	}
	for f, n := range fam {
		if n > 40 {
			t.Errorf("%s has %d series after %d hostile fence names", f, n, hostile)
		}
	}
	t.Logf("clients saw: %v; per fence/reason: %v; families: %v", seen, byFence, fam)
}

func grpcRedis7(ctx context.Context, t *testing.T, gc fencegatev1.GatewayClient, fence string) (rt2Outcome, string) {
	t.Helper()
	cmd, _ := structpb.NewList([]any{"SET", "{" + fence + "}:k", "1"})
	_, err := gc.Redis(metadata.AppendToOutgoingContext(ctx, "fencing-token", "7"), &fencegatev1.RedisRequest{Fence: fence, Commands: []*structpb.ListValue{cmd}})
	out, reason, detail := rt2GRPCAnswer(err)
	if out != rt2Refused {
		t.Fatalf("gRPC hostile %s: %v %s", fence, out, detail)
	}
	return out, reason
}

func keysOf(m map[string]bool, n int) []string {
	var out []string
	for k := range m {
		if len(out) == n {
			break
		}
		out = append(out, k)
	}
	return out
}
