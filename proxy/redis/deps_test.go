package redis

import (
	"crypto/tls"
	"sort"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/proxy/redis/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

// minimalACL is the rule set docs/SECURITY.md gives fencegate's own Redis
// user (after "ACL SETUSER fencegate on >secret"): the commands the
// backend sends (PING, INFO, EVALSHA, EVAL, GET, SCAN), those its script runs
// around the caller's (DUMP, PEXPIRETIME, RESTORE, DEL, STRLEN, GET, HGET,
// SET), and the default allowlist. Keep the two in step.
const minimalACL = "resetkeys ~* resetchannels -@all +ping +info +evalsha +eval +scan +dump +pexpiretime +restore " +
	"+append +decr +decrby +del +exists +expire +expireat +get +getdel +getex +getrange +getset " +
	"+hdel +hexists +hget +hgetall +hincrby +hincrbyfloat +hkeys +hlen +hmget +hmset +hset +hsetnx +hvals " +
	"+incr +incrby +incrbyfloat +lindex +linsert +llen +lmove +lpop +lpush +lpushx +lrange +lrem +lset +ltrim " +
	"+mget +mset +msetnx +persist +pexpire +pexpireat +psetex +pttl +rpop +rpush +rpushx " +
	"+sadd +scard +set +setex +setnx +setrange +sismember +smembers +smove +spop +srem +strlen +ttl +type +unlink " +
	"+xadd +xdel +xlen +xrange +xtrim +zadd +zcard +zcount +zincrby +zrange +zrangebyscore +zrank +zrem " +
	"+zremrangebyrank +zremrangebyscore +zscore"

// backendCommands are what the backend sends or its script runs besides
// the caller's commands.
var backendCommands = []string{"ping", "info", "evalsha", "eval", "scan", "get", "dump", "pexpiretime", "restore", "del", "strlen", "hget", "set"}

// TestDepsACLCoversAllowlist keeps minimalACL in step with the code: it
// grants exactly the default allowlist and the backend's own commands.
func TestDepsACLCoversAllowlist(t *testing.T) {
	t.Parallel()
	want := map[string]bool{}
	for _, c := range backendCommands {
		want[c] = true
	}
	for name, s := range commandTable {
		if !s.optional {
			want[strings.ToLower(name)] = true
		}
	}
	got := map[string]bool{}
	for _, f := range strings.Fields(minimalACL) {
		if c, ok := strings.CutPrefix(f, "+"); ok {
			got[c] = true
		}
	}
	for c := range want {
		if !got[c] {
			t.Errorf("minimalACL: got no +%s, want it (the backend or the default allowlist uses it)", c)
		}
	}
	for c := range got {
		if !want[c] {
			t.Errorf("minimalACL: got +%s, want it gone (nothing fencegate sends needs it)", c)
		}
	}
}

// TestDepsACLUser runs the backend as a Redis user with exactly
// minimalACL: fenced writes, a rollback (DUMP, PEXPIRETIME, RESTORE),
// APPEND's weighing (STRLEN), an INCR read back past 2^53 (GET), a stale
// refusal, HighWater and Fences all work; every allowlisted command passes
// the ACL and administrative ones do not; a wrong password fails Open with
// one line, and so does a user without the rollback's commands (the
// minimal ACL before the rollback read PEXPIRETIME, too).
func TestDepsACLUser(t *testing.T) {
	t.Parallel()
	srv, err := throwaway.Start(t.Context(), throwaway.Options{
		Users: []string{
			"fencegate on >s3cret " + minimalACL,
			"norestore on >s3cret " + minimalACL + " -restore -pexpiretime",
			// The minimal ACL of releases whose rollback read PTTL.
			"oldacl on >s3cret " + minimalACL + " -pexpiretime",
			"noeval on >s3cret " + minimalACL + " -eval",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })

	cfg := DefaultConfig()
	cfg.Username, cfg.Password = "fencegate", "s3cret"
	b, err := Open(t.Context(), srv.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	fence := "acl"
	k := func(name string) string { return key(fence, name) }
	ctx := t.Context()
	steps := []struct {
		tok  tokens.Token
		cmds [][]string
		want tokens.Reason // "" for applied
	}{
		{5, [][]string{{"SET", k("s"), "v"}, {"HSET", k("h"), "f", "1"}, {"LPUSH", k("l"), "a"}, {"ZADD", k("z"), "1", "m"}, {"XADD", k("x"), "*", "f", "v"}}, ""},
		{5, [][]string{{"APPEND", k("s"), "w"}, {"SET", k("n"), "9007199254740990"}, {"INCRBY", k("n"), "10"}, {"PEXPIRE", k("s"), "100000"}}, ""},
		// The second command fails: the first is rolled back by RESTORE.
		{6, [][]string{{"SET", k("s"), "changed"}, {"INCR", k("h")}}, tokens.ReasonStatementFailed},
		{4, [][]string{{"SET", k("s"), "stale"}}, tokens.ReasonStaleToken},
	}
	for i, st := range steps {
		_, err := b.Exec(ctx, fence, st.tok, st.cmds)
		if st.want == "" && err != nil {
			t.Fatalf("step %d: got %v, want applied", i, err)
		}
		if st.want != "" {
			if r, ok := tokens.AsRefusal(err); !ok || r.Reason != st.want {
				t.Fatalf("step %d: got %v, want %s", i, err, st.want)
			}
			if r, _ := tokens.AsRefusal(err); st.want == tokens.ReasonStatementFailed && strings.Contains(r.Error(), "NOPERM") {
				t.Fatalf("step %d: got %v, want the command's own failure, not an ACL refusal", i, err)
			}
		}
	}
	db := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = db.Close() })
	if got, err := db.Get(ctx, k("s")).Result(); err != nil || got != "vw" {
		t.Errorf("after the rollback: got %q, %v; want %q", got, err, "vw")
	}
	if ttl, err := db.PTTL(ctx, k("s")).Result(); err != nil || ttl <= 0 {
		t.Errorf("TTL after the rollback: got %v, %v; want it kept", ttl, err)
	}
	if hw, ok, err := b.HighWater(ctx, fence); err != nil || !ok || hw != 5 {
		t.Errorf("HighWater: got %d, %v, %v; want 5, true, nil", hw, ok, err)
	}
	if fs, err := b.Fences(ctx); err != nil || len(fs) != 1 || fs[0].Name != fence {
		t.Errorf("Fences: got %v, %v; want [%s]", fs, err, fence)
	}
	// After a restart the server has lost the script: EVALSHA, then EVAL.
	if _, err := db.ScriptFlush(ctx).Result(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, fence, 7, [][]string{{"SET", k("s"), "after flush"}}); err != nil {
		t.Errorf("Exec after SCRIPT FLUSH: got %v, want applied", err)
	}

	// Every allowlisted command passes the ACL with arguments of its arity.
	allowed := make([]string, 0, len(b.allow))
	for name := range b.allow {
		allowed = append(allowed, name)
	}
	sort.Strings(allowed)
	for _, name := range allowed {
		s := b.allow[name]
		n := s.arity
		if n < 0 {
			n = -n
		}
		args := []any{"ACL", "DRYRUN", "fencegate", name}
		for range n - 1 {
			args = append(args, k("x"))
		}
		if got, err := db.Do(ctx, args...).Text(); err != nil || got != "OK" {
			t.Errorf("ACL DRYRUN %s: got %q, %v; want OK", name, got, err)
		}
	}
	for _, cmd := range [][]any{{"FLUSHALL"}, {"CONFIG", "GET", "*"}, {"KEYS", "*"}, {"SELECT", "1"}, {"SCRIPT", "FLUSH"}, {"FUNCTION", "LIST"}, {"ACL", "LIST"}} {
		args := append([]any{"ACL", "DRYRUN", "fencegate"}, cmd...)
		if got, err := db.Do(ctx, args...).Text(); err != nil || got == "OK" {
			t.Errorf("ACL DRYRUN %v: got %q, %v; want it refused", cmd, got, err)
		}
	}

	// A user who could not roll a failed write back is refused at Open:
	// Redis would abort the script at RESTORE and keep the half-done write.
	for _, tc := range []struct{ name, user, pass, want string }{
		{"wrong password", "fencegate", "wrong", "WRONGPASS"},
		{"unknown user", "nobody", "s3cret", "WRONGPASS"},
		{"no RESTORE", "norestore", "s3cret", `user "norestore" on ` + srv.Addr() + " may not run PEXPIRETIME, RESTORE, which"},
		{"no PEXPIRETIME", "oldacl", "s3cret", `user "oldacl" on ` + srv.Addr() + " may not run PEXPIRETIME, which"},
		{"no EVAL", "noeval", "s3cret", "NOPERM"},
	} {
		bad := DefaultConfig()
		bad.Username, bad.Password = tc.user, tc.pass
		_, err := Open(ctx, srv.Addr(), bad)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Open with %s: got %v, want one line with %q", tc.name, err, tc.want)
		}
	}
}

// TestDepsTLS runs the backend over TLS with a client certificate, against
// a server that serves only TLS and requires one; without TLS, without the
// certificate, or trusting another CA, Open fails with one line.
func TestDepsTLS(t *testing.T) {
	t.Parallel()
	ca := authtest.NewCA(t, "redis")
	other := authtest.NewCA(t, "other")
	srvCert := ca.Localhost(t, "redis-server")
	client := ca.Issue(t, "fencegate", authtest.Leaf{CommonName: "fencegate", Client: true})
	srv, err := throwaway.Start(t.Context(), throwaway.Options{
		TLS:   &throwaway.TLSOptions{CertFile: srvCert.CertFile, KeyFile: srvCert.KeyFile, CAFile: ca.File, AuthClients: true},
		Users: []string{"fencegate on >s3cret " + minimalACL},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })

	cfg := DefaultConfig()
	cfg.TLS = ca.ClientTLS(client)
	cfg.Username, cfg.Password = "fencegate", "s3cret"
	b, err := Open(t.Context(), srv.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	fence := "tls"
	if _, err := b.Exec(t.Context(), fence, 3, [][]string{{"SET", key(fence, "k"), "v"}, {"INCR", key(fence, "n")}}); err != nil {
		t.Fatalf("Exec over TLS: got %v, want applied", err)
	}
	if hw, _, err := b.HighWater(t.Context(), fence); err != nil || hw != 3 {
		t.Errorf("HighWater over TLS: got %d, %v; want 3", hw, err)
	}

	tests := []struct {
		name string
		tls  *tls.Config
		want string
	}{
		{"plain TCP", nil, "TLS"},
		{"no client certificate", ca.ClientTLS(nil), "certificate"},
		{"another CA", other.ClientTLS(client), "certificate signed by unknown authority"},
		{"wrong server name", func() *tls.Config { c := ca.ClientTLS(client); c.ServerName = "redis.example"; return c }(), "redis.example"},
	}
	for _, tc := range tests {
		c := DefaultConfig()
		c.TLS, c.Username, c.Password = tc.tls, "fencegate", "s3cret"
		c.DialTimeout = 2 * time.Second
		_, err := Open(t.Context(), srv.Addr(), c)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), srv.Addr()) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want one line naming %s and containing %q", tc.name, err, srv.Addr(), tc.want)
		}
	}
}
