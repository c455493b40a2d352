package postgres

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
)

// TestTLSVerifyFull connects over TLS as docs/SECURITY.md says to:
// sslmode=verify-full with sslrootcert, to a server whose certificate
// names localhost and 127.0.0.1. Trusting another CA,
// or asking for TLS from a server without it fails Open with one line.
func TestTLSVerifyFull(t *testing.T) {
	t.Parallel()
	ca := authtest.NewCA(t, "pg")
	other := authtest.NewCA(t, "other")
	cert := ca.Localhost(t, "pg-server")
	srv, err := throwaway.Start(t.Context(), throwaway.Options{TLS: &throwaway.TLSOptions{CertFile: cert.CertFile, KeyFile: cert.KeyFile}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	plain, err := throwaway.Start(t.Context(), throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close() })

	dsn := func(host string, port int, params string) string {
		return fmt.Sprintf("postgres://postgres@%s:%d/postgres?%s", host, port, params)
	}
	tests := []struct {
		name string
		dsn  string
		want string // in the error; "" to connect
	}{
		{"127.0.0.1", dsn("127.0.0.1", srv.Port(), "sslmode=verify-full&sslrootcert="+ca.File), ""},
		{"localhost", dsn("localhost", srv.Port(), "sslmode=verify-full&sslrootcert="+ca.File), ""},
		{"another CA", dsn("127.0.0.1", srv.Port(), "sslmode=verify-full&sslrootcert="+other.File), "certificate signed by unknown authority"},
		{"server without TLS", dsn("127.0.0.1", plain.Port(), "sslmode=verify-full&sslrootcert="+ca.File), "server refused TLS connection"},
	}
	for _, tc := range tests {
		b, err := Open(t.Context(), tc.dsn, Config{})
		if b != nil {
			var ssl bool
			if err := b.pool.QueryRow(t.Context(), "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
				t.Errorf("%s: pg_stat_ssl.ssl got %v, %v; want true", tc.name, ssl, err)
			}
			b.Close()
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: got %v, want to connect", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: got error %q, want one line", tc.name, err)
		}
	}
}
