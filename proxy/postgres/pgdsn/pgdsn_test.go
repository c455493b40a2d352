package pgdsn_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/proxy/postgres/pgdsn"
)

func TestParseErrorShowsNoPassword(t *testing.T) {
	for _, tc := range []struct {
		dsn, secret, reason string
	}{
		{"host=127.0.0.1 user=gw password = Rt22FullLeak sslmode=verify-full sslrootcert=/nonexistent/ca.pem", "Rt22FullLeak", "unable to read CA file"},
		{`host=127.0.0.1 user=gw password='Rt22\' QuoteTail' sslmode=bogus`, "QuoteTail", "sslmode is invalid"},
		{"postgres://gw:Rt22@AtTail@127.0.0.1:1/db?sslmode=bogus", "AtTail", "sslmode is invalid"},
		{"postgres://gw:pw%zzSecret@127.0.0.1/db", "Secret", "failed to parse as URL"},
		{"postgres://gw:Secret@[::1/db", "Secret", "failed to parse as URL"},
		{"host=h password=ab cd Secret=x", "cd", `missing "=" after`},
		{"host=h password=pw target_session_attrs=Secret", "Secret", "target_session_attrs"},
		{"host=h password=Secret pool_max_conns=x", "Secret", "pool_max_conns"},
	} {
		for name, parse := range map[string]func(string) error{
			"pgconn":  func(s string) error { _, err := pgconn.ParseConfig(s); return err },
			"pgx":     func(s string) error { _, err := pgx.ParseConfig(s); return err },
			"pgxpool": func(s string) error { _, err := pgxpool.ParseConfig(s); return err },
		} {
			raw := parse(tc.dsn)
			if raw == nil {
				if name == "pgxpool" || !strings.Contains(tc.dsn, "pool_") {
					t.Errorf("%s: %q parsed, want an error", name, tc.dsn)
				}
				continue
			}
			err := pgdsn.ParseError(raw)
			var pe *pgdsn.Error
			if !errors.As(err, &pe) {
				t.Errorf("%s: %q: got %T %v, want *pgdsn.Error", name, tc.dsn, err, err)
				continue
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Errorf("%s: %q: got %q, which shows %q", name, tc.dsn, err, tc.secret)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("%s: %q: got %q, want the reason %q", name, tc.dsn, err, tc.reason)
			}
		}
	}
}

func TestParseErrorPassesOthers(t *testing.T) {
	other := errors.New("postgres: something else")
	if got := pgdsn.ParseError(other); got != other { //nolint:errorlint // the very error, not wrapped
		t.Errorf("got %v, want the error unchanged", got)
	}
}
