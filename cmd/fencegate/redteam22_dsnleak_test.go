package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRedTeam22DSNPasswordInParseErrors
//
// Attack: the PostgreSQL password is kept out of ps by passing the DSN in
// FENCEGATE_POSTGRES_DSN, as --help recommends for secrets, and the DSN
// has an ordinary mistake that only shows at parse time (here a
// sslrootcert path that is not mounted yet, or a typo in sslmode).
// Three legal spellings of the password are used:
//   - libpq keyword/value with spaces around '=' ("password = ...",
//     which libpq documents as allowed and pgx accepts),
//   - a quoted keyword/value password with an escaped quote
//     with a space after it (password='abc\' def'),
//   - a URL whose password contains an unescaped '@' (Go's URL parser and
//     pgx take everything up to the last '@' as userinfo).
//
// What happened: serve, migrate and grant print pgx's "cannot parse `...`"
// error, which echoes the whole DSN and whose redaction only knows the
// plain "password=value" and "user:password@" shapes: the first password
// is printed in full, the other two in part (everything after the escaped
// quote or after the first '@'). The error goes to stderr, i.e. the
// journal or the container log, read by far more people than the secret
// store it came from. grant.go even relies on it ("pgx redacts the
// password in parse errors").
//
// What should happen: fencegate never echoes a DSN it failed to parse (or
// redacts it itself, from the parsed or tokenized form): the message names
// the flag and the reason only; no part of the password appears.
//
// Severity: medium (credential disclosure into logs, on a common
// misconfiguration path).
func TestRedTeam22DSNPasswordInParseErrors(t *testing.T) {
	bin := rt2Binary(t)
	cases := []struct {
		name, dsn, secret string
	}{
		{"keyword value, spaces around =", "host=127.0.0.1 port=1 user=gw password = Rt22FullLeak sslmode=verify-full sslrootcert=/nonexistent/ca.pem", "Rt22FullLeak"},
		{"quoted keyword value with an escaped quote", `host=127.0.0.1 port=1 user=gw password='Rt22\' QuoteTail' sslmode=bogus`, "QuoteTail"},
		{"URL, @ in the password", "postgres://gw:Rt22@AtTail@127.0.0.1:1/db?sslmode=bogus", "AtTail"},
	}
	commands := map[string][]string{
		"serve":   {"serve", "--etcd-endpoints=", "--term-sources=*=monotonic"},
		"migrate": {"migrate"},
		"grant":   {"grant", "--login=gw", "--role=writer"},
	}
	for _, c := range cases {
		for cmdName, args := range commands {
			t.Run(c.name+"/"+cmdName, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Env = append(os.Environ(), "FENCEGATE_POSTGRES_DSN="+c.dsn)
				out, err := cmd.CombinedOutput()
				if err == nil {
					t.Fatalf("%s accepted the DSN:\n%s", cmdName, out)
				}
				if strings.Contains(string(out), c.secret) {
					t.Errorf("fencegate %s printed (part of) the password %q from FENCEGATE_POSTGRES_DSN:\n%s", cmdName, c.secret, out)
				}
			})
		}
	}
}
