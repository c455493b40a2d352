package main

import (
	"strings"
	"testing"
)

// TestRedTeam15ZeroMeansDefaultFlags: the PostgreSQL and Redis backends
// take 0 as "the default" for these limits (postgres.Config and
// redis.Config withDefaults; --write-timeout=0 is "as
// --statement-timeout"), so before the usage-error change serve went on
// past them to dial etcd. checkRanges now refuses each with exit 2: a
// command line or FENCEGATE_* environment that started fencegate no
// longer does.
func TestRedTeam15ZeroMeansDefaultFlags(t *testing.T) {
	const pg = "--postgres-dsn=postgres://x@127.0.0.1:1/x"
	base := []string{"serve", pg, "--redis-addr=127.0.0.1:1", "--etcd-endpoints=127.0.0.1:1", "--etcd-dial-timeout=300ms"}
	for _, tt := range []struct {
		flag string
		env  string
	}{
		{"--statement-timeout=0s", "FENCEGATE_STATEMENT_TIMEOUT"},
		{"--write-timeout=0s", "FENCEGATE_WRITE_TIMEOUT"},
		{"--max-result-rows=0", "FENCEGATE_MAX_RESULT_ROWS"},
		{"--max-result-bytes=0", "FENCEGATE_MAX_RESULT_BYTES"},
		{"--redis-pool-size=0", "FENCEGATE_REDIS_POOL_SIZE"},
		{"--redis-max-reply-bytes=0", "FENCEGATE_REDIS_MAX_REPLY_BYTES"},
	} {
		t.Run(tt.flag, func(t *testing.T) {
			got, code := fencegateCLI(t, append(append([]string(nil), base...), tt.flag)...)
			if code != 1 || !strings.Contains(got, "etcd at 127.0.0.1:1 is unreachable") {
				t.Errorf("fencegate serve %s: got status %d, stderr %q; want status 1, etcd unreachable (the value is the backend's default, as before)", tt.flag, code, got)
			}
		})
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv(tt.env, "0")
			if strings.HasSuffix(tt.env, "TIMEOUT") {
				t.Setenv(tt.env, "0s")
			}
			got, code := fencegateCLI(t, base...)
			if code != 1 || !strings.Contains(got, "etcd at 127.0.0.1:1 is unreachable") {
				t.Errorf("%s=0 fencegate serve: got status %d, stderr %q; want status 1, etcd unreachable", tt.env, code, got)
			}
		})
	}
}
