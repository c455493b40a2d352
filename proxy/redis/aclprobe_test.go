package redis

import (
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/proxy/redis/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

// TestKeyScopedACLRefusedUpFront: under an ACL that differs by key (a
// selector granting a command on fencegate's own keys only, which Open's
// check sees), a write for which the script would have to run that
// command on a caller's key (STRLEN, GET, HGET, RESTORE, DEL) or on the
// fence's token key (SET) is refused before anything is written, naming
// the command; a write that needs none of them runs.
func TestKeyScopedACLRefusedUpFront(t *testing.T) {
	const fence = "aclprobe"
	k := func(name string) string { return key(fence, name) }
	const nearLimit = "9007199254740990" // 2^53 - 2
	tests := []struct {
		name   string
		denied string // the command the user may run on fencegate:* only
		setup  map[string]string
		cmds   [][]string
		// want: "" for applied, else the reason, the command index (""
		// for none) and metadata "permission".
		want       tokens.Reason
		command    string
		permission string
	}{
		{
			name: "INCRBY read back", denied: "get", setup: map[string]string{"n": nearLimit},
			cmds:    [][]string{{"SET", k("other"), "x"}, {"INCRBY", k("n"), "10"}},
			want:    tokens.ReasonStatementFailed,
			command: "1", permission: "GET",
		},
		{
			name: "DECR read back, one step", denied: "get", setup: map[string]string{"n": "5"},
			cmds:    [][]string{{"DECR", k("n")}},
			want:    tokens.ReasonStatementFailed,
			command: "0", permission: "GET",
		},
		{
			name: "no read back needed", denied: "get",
			cmds: [][]string{{"SET", k("other"), "x"}, {"LPUSH", k("l"), "a"}},
		},
		{
			name: "HINCRBY read back", denied: "hget",
			cmds:    [][]string{{"HSET", k("h"), "g", "1"}, {"HINCRBY", k("h"), "f", "1"}},
			want:    tokens.ReasonStatementFailed,
			command: "1", permission: "HGET",
		},
		{
			name: "APPEND weighed", denied: "strlen", setup: map[string]string{"s": "abc"},
			cmds:    [][]string{{"APPEND", k("s"), "0123456789"}},
			want:    tokens.ReasonStatementFailed,
			command: "0", permission: "STRLEN",
		},
		{
			name: "rollback RESTORE", denied: "restore",
			cmds:    [][]string{{"GET", k("a")}, {"SET", k("a"), "1"}, {"ZADD", k("z"), "1", "m"}},
			want:    tokens.ReasonStatementFailed,
			command: "1", permission: "RESTORE",
		},
		{
			name: "one step needs no rollback", denied: "restore",
			cmds: [][]string{{"SET", k("a"), "1"}},
		},
		{
			name: "rollback DEL", denied: "del",
			cmds:    [][]string{{"ZADD", k("z"), "1", "m"}, {"SET", k("a"), "1"}},
			want:    tokens.ReasonStatementFailed,
			command: "0", permission: "DEL",
		},
		// Open checks SET on fencegate:{acl-check}:token only.
		{
			name: "token key SET", denied: "set",
			cmds:       [][]string{{"INCR", k("n")}, {"LPUSH", k("l"), "a"}},
			want:       tokens.ReasonBackendUnavailable,
			permission: "SET",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			selector := "~fencegate:*"
			if tt.denied == "set" {
				selector = "~fencegate:{acl-check}:*"
			}
			b, db, err := scopedACL(t, "~* +@all -"+tt.denied+" ("+selector+" +"+tt.denied+")")
			if err != nil {
				t.Fatal(err)
			}
			for name, v := range tt.setup {
				if err := db.Set(ctx, k(name), v, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			before := dumpAll(t, db)

			_, err = b.Exec(ctx, fence, 5, tt.cmds)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want applied", err)
				}
				if got := db.Get(ctx, TokenKey(fence)).Val(); got != "5" {
					t.Errorf("mark %q, want 5", got)
				}
				return
			}
			r, ok := tokens.AsRefusal(err)
			if !ok || r.Reason != tt.want {
				t.Fatalf("got %v, want %s", err, tt.want)
			}
			t.Logf("refused: %v (metadata %v)", r, r.Metadata)
			if got := r.Metadata["command"]; got != tt.command {
				t.Errorf("metadata command %q, want %q", got, tt.command)
			}
			if got := r.Metadata["permission"]; got != tt.permission {
				t.Errorf("metadata permission %q, want %q", got, tt.permission)
			}
			if _, ok := r.Metadata["error"]; ok {
				t.Errorf("metadata error %q: fencegate's refusal passed as Redis's error", r.Metadata["error"])
			}
			if _, ok := r.Metadata["outcome"]; ok {
				t.Errorf("metadata outcome %q, want none: nothing was written", r.Metadata["outcome"])
			}
			if msg := r.Error(); !strings.Contains(msg, "may not "+tt.permission+" key") {
				t.Errorf("message %q does not name the command and key", msg)
			}
			if after := dumpAll(t, db); after != before {
				t.Errorf("refused write changed the data:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// dumpAll describes every key and its value as DUMP gives it.
func dumpAll(t *testing.T, db *goredis.Client) string {
	t.Helper()
	keys, err := db.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + db.Dump(t.Context(), k).Val() + " ")
	}
	return b.String()
}

// scopedACL starts a throwaway Redis whose user fencegate has acl (an ACL
// SETUSER rule list, e.g. "~* +@all -get (~fencegate:* +get)", password
// s3cret), opens a Backend as that user, with the default config as tune
// changes it, and returns it (nil, and Open's error, if Open refused the
// user) with an admin client.
func scopedACL(t *testing.T, acl string, tune ...func(*Config)) (*Backend, *goredis.Client, error) {
	t.Helper()
	ctx := t.Context()
	srv, err := throwaway.Start(ctx, throwaway.Options{Users: []string{"fencegate on >s3cret " + acl}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	db := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = db.Close() })
	cfg := DefaultConfig()
	cfg.Username, cfg.Password = "fencegate", "s3cret"
	for _, f := range tune {
		f(&cfg)
	}
	b, err := Open(ctx, srv.Addr(), cfg)
	if err != nil {
		return nil, db, err
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, db, nil
}
