package api_test

import (
	"fmt"
	"net/http"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
)

func rdb(t *testing.T) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	return c
}

func redisHTTP(t *testing.T, r *replica, fence string, token int64, body string) httpReply {
	t.Helper()
	tok := ""
	if token != 0 {
		tok = fmt.Sprint(token)
	}
	return doHTTP(t, http.MethodPost, r.url+"/v1/fences/"+fence+"/redis", tok, body)
}

func TestRedisHTTP(t *testing.T) {
	r := startReplica(t, true)
	c := rdb(t)
	fence := fenceName(t)
	cli := newEtcdClient(t)
	a := campaign(t, cli, fence, "worker-a")
	waitTerm(t, r, fence, a.token)
	key := "{" + fence + "}:last"

	got := redisHTTP(t, r, fence, a.token, fmt.Sprintf(`{"commands":[["SET",%q,"7"],["INCR","{%s}:count"],["GET","{%s}:none"],["RPUSH","{%s}:l","x","y"],["LRANGE","{%s}:l",0,-1]]}`, key, fence, fence, fence, fence))
	if got.code != 200 {
		t.Fatalf("leader a: got HTTP %d %v, want 200", got.code, got.body)
	}
	if want := "[OK 1 <nil> 2 [x y]]"; fmt.Sprint(got.body["results"]) != want {
		t.Errorf("got results %v, want %s", got.body["results"], want)
	}
	if got.body["token"] != fmt.Sprint(a.token) {
		t.Errorf("got token %v, want %d", got.body["token"], a.token)
	}

	tests := []struct {
		name   string
		token  int64
		body   string
		code   int
		reason string
	}{
		{"missing token", 0, fmt.Sprintf(`{"commands":[["SET",%q,"8"]]}`, key), 400, "MISSING_TOKEN"},
		{"not allowed", a.token, fmt.Sprintf(`{"commands":[["SET",%q,"8"],["FLUSHALL"]]}`, key), 403, "COMMAND_NOT_ALLOWED"},
		{"script", a.token, fmt.Sprintf(`{"commands":[["SET",%q,"8"],["EVAL","return 1","0"]]}`, key), 403, "COMMAND_NOT_ALLOWED"},
		{"bad arity", a.token, fmt.Sprintf(`{"commands":[["SET",%q,"8"],["GET"]]}`, key), 400, "INVALID_REQUEST"},
		{"cross slot", a.token, fmt.Sprintf(`{"commands":[["SET",%q,"8"],["SET","elsewhere","8"]]}`, key), 400, "INVALID_REQUEST"},
		{"bad argument", a.token, fmt.Sprintf(`{"commands":[["SET",%q,{"x":1}]]}`, key), 400, "INVALID_REQUEST"},
		{"no commands", a.token, `{"commands":[]}`, 400, "INVALID_REQUEST"},
		{"wrongtype mid-request", a.token, fmt.Sprintf(`{"commands":[["SET",%q,"8"],["LPUSH",%q,"x"]]}`, key, key), 400, "STATEMENT_FAILED"},
		{"forged", a.token + 500, fmt.Sprintf(`{"commands":[["SET",%q,"8"]]}`, key), 400, "UNKNOWN_TERM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantRefusal(t, redisHTTP(t, r, fence, tt.token, tt.body), tt.code, tt.reason)
		})
	}
	if v, _ := c.Get(t.Context(), key).Result(); v != "7" {
		t.Errorf("got %s = %q after refused writes, want \"7\"", key, v)
	}

	// a resigns: ended; b leads: a is stale.
	a.resign(t)
	waitTerm(t, r, fence, 0)
	wantRefusal(t, redisHTTP(t, r, fence, a.token, fmt.Sprintf(`{"commands":[["SET",%q,"9"]]}`, key)), 409, "TERM_ENDED")
	b := campaign(t, cli, fence, "worker-b")
	waitTerm(t, r, fence, b.token)
	wantRefusal(t, redisHTTP(t, r, fence, a.token, fmt.Sprintf(`{"commands":[["SET",%q,"9"]]}`, key)), 409, "STALE_TOKEN")
	if got := redisHTTP(t, r, fence, b.token, fmt.Sprintf(`{"commands":[["SET",%q,"10"]]}`, key)); got.code != 200 {
		t.Fatalf("leader b: got HTTP %d %v, want 200", got.code, got.body)
	}
	if v, _ := c.Get(t.Context(), key).Result(); v != "10" {
		t.Errorf("got %s = %q, want \"10\"", key, v)
	}
	f := doHTTP(t, http.MethodGet, r.url+"/v1/fences/"+fence, "", "")
	if f.body["highWater"] != fmt.Sprint(b.token) {
		t.Errorf("GET fence: got highWater %v, want %d", f.body["highWater"], b.token)
	}
}

// The backend check holds in Redis too: a replica with a frozen view lets
// the old leader through to Redis, and the script refuses it.
func TestRedisStaleReplicaRefusedByBackend(t *testing.T) {
	live := startReplica(t, true)
	// Stopped, but unaware of it, as a watch lagging behind etcd is: a
	// replica that knows its watch is lost reads etcd instead
	// (TestRedTeam2ReplicaCutFromEtcdAcceptsEndedTerm).
	frozen := startUnawareReplica(t)
	c := rdb(t)
	fence := fenceName(t)
	cli := newEtcdClient(t)
	key := "{" + fence + "}:ledger"

	a := campaign(t, cli, fence, "worker-a")
	waitTerm(t, live, fence, a.token)
	waitTerm(t, frozen, fence, a.token)
	frozen.stop()
	a.resign(t)
	b := campaign(t, cli, fence, "worker-b")
	waitTerm(t, live, fence, b.token)
	if got := redisHTTP(t, live, fence, b.token, fmt.Sprintf(`{"commands":[["RPUSH",%q,"b"]]}`, key)); got.code != 200 {
		t.Fatalf("leader b: got HTTP %d %v, want 200", got.code, got.body)
	}
	if got := frozen.watcher.Term(fence).Rev; got != a.token {
		t.Fatalf("frozen replica's term: got %d, want %d", got, a.token)
	}
	got := redisHTTP(t, frozen, fence, a.token, fmt.Sprintf(`{"commands":[["RPUSH",%q,"zombie"]]}`, key))
	wantRefusal(t, got, 409, "STALE_TOKEN")
	if got.metadata["highWater"] != fmt.Sprint(b.token) {
		t.Errorf("got highWater %v, want %d", got.metadata["highWater"], b.token)
	}
	if l, _ := c.LRange(t.Context(), key, 0, -1).Result(); fmt.Sprint(l) != "[b]" {
		t.Errorf("got ledger %v, want [b]: the zombie's value landed", l)
	}
}

func TestRedisGRPC(t *testing.T) {
	r := startReplica(t, true)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	cmd := func(args ...any) *structpb.ListValue {
		lv, err := structpb.NewList(args)
		if err != nil {
			t.Fatal(err)
		}
		return lv
	}
	req := &fencegatev1.RedisRequest{Fence: fence, Commands: []*structpb.ListValue{
		cmd("SET", "{"+fence+"}:n", 41), cmd("INCR", "{"+fence+"}:n"),
	}}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "fencing-token", fmt.Sprint(l.token))
	resp, err := r.grpc.Redis(ctx, req)
	if err != nil {
		t.Fatalf("Redis: %v", err)
	}
	if got := fmt.Sprint(resp.Results[0].AsInterface(), " ", resp.Results[1].AsInterface()); got != "OK 42" {
		t.Errorf("got %s, want OK 42", got)
	}
	req.Commands = append(req.Commands, cmd("CONFIG", "SET", "maxmemory", "1"))
	_, err = r.grpc.Redis(ctx, req)
	if st := status.Convert(err); st.Code() != codes.PermissionDenied {
		t.Errorf("CONFIG SET: got %v, want PermissionDenied", err)
	}
}
