package pgwire_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/api/pgwire"
	pgthrowaway "github.com/fencegate/fencegate/proxy/postgres/throwaway"
)

// TestRedTeam8ScramOverSplitTLS: the listener relays SCRAM with
// SCRAM-SHA-256-PLUS taken out of the offer ("no -PLUS when TLS splits
// the connection"). A client that speaks TLS to the listener and then
// sees no -PLUS says so in its GS2 header ("y,,": I can bind, I think
// you cannot); libpq does so by default (channel_binding=prefer) and pgx
// always. A database that itself speaks TLS (the listener's hop to it)
// and supports channel binding must then fail the exchange (RFC 5802
// downgrade protection): "SCRAM channel binding negotiation error". The
// same client straight to the same database logs in. The listener
// cannot rewrite the flag (the client's proof covers c=eSws), so a
// TLS client cannot log in with SCRAM through it when the database hop
// is TLS, and is told nothing about why.
func TestRedTeam8ScramOverSplitTLS(t *testing.T) {
	ctx := t.Context()
	ca := authtest.NewCA(t, "rt8-scram")
	dbCert := ca.Localhost(t, "database")
	gwCert := ca.Localhost(t, "fencegate")
	db, err := pgthrowaway.Start(ctx, pgthrowaway.Options{TLS: &pgthrowaway.TLSOptions{CertFile: dbCert.CertFile, KeyFile: dbCert.KeyFile}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, r := range []string{"worker", "rt8_scram"} {
		if _, err := db.ListenerRole(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.RuntimeRole(ctx, "gateway"); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, db.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	hba := "hostssl all rt8_scram 127.0.0.1/32 scram-sha-256\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 0.0.0.0/0 reject\nlocal all all trust\n"
	if err := os.WriteFile(db.DataDir()+"/pg_hba.conf", []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"SET password_encryption = 'scram-sha-256'",
		"ALTER ROLE rt8_scram PASSWORD 'secret'",
		"SELECT pg_reload_conf()",
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	time.Sleep(200 * time.Millisecond) // the postmaster reloads asynchronously

	e := newEnvWith(t, pgwire.Config{
		PostgresDSN: fmt.Sprintf("postgres://ignored@localhost:%d/postgres?sslmode=verify-full&sslrootcert=%s", db.Port(), ca.File),
		TLS: func() *tls.Config {
			return &tls.Config{Certificates: []tls.Certificate{gwCert.TLS}, MinVersion: tls.VersionTLS12}
		},
	}, envOptions{poolDSN: fmt.Sprintf("postgres://gateway@localhost:%d/postgres?sslmode=verify-full&sslrootcert=%s", db.Port(), ca.File)})
	tok, _ := e.lead(t, "rt8-scram")

	// Baseline: the same client, straight to the database, over TLS.
	direct, err := pgx.Connect(ctx, fmt.Sprintf("postgres://rt8_scram:secret@localhost:%d/postgres?sslmode=verify-full&sslrootcert=%s", db.Port(), ca.File))
	if err != nil {
		t.Fatalf("pgx straight to the database over TLS: %v", err)
	}
	direct.Close(ctx)

	via := fmt.Sprintf("postgres://rt8_scram:secret@localhost:%s/postgres?sslmode=verify-full&sslrootcert=%s&fencegate.fence=rt8-scram&fencegate.token=%d", e.port, ca.File, tok)
	// The way in that works: the client does not claim channel binding.
	t.Run("pgx channel_binding=disable", func(t *testing.T) {
		c, err := pgx.Connect(ctx, via+"&channel_binding=disable")
		if err != nil {
			t.Fatalf("pgx, channel_binding=disable: %v", err)
		}
		c.Close(ctx)
	})
	// Defaults: logs in, or is at least told how to (the listener sees
	// the "y" flag in the SASLInitialResponse and knows its hop to the
	// database is TLS), not the database's words about a server the
	// client never reached.
	t.Run("pgx", func(t *testing.T) {
		c, err := pgx.Connect(ctx, via)
		if err == nil {
			c.Close(ctx)
			return
		}
		if !strings.Contains(err.Error(), "channel_binding") {
			t.Fatalf("pgx over TLS through the listener, SCRAM: %v\n(straight to the database it logs in; with channel_binding=disable through the listener too; want it to log in, or a FATAL naming channel_binding=disable)", err)
		}
	})
	t.Run("psql", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, "psql", "-X", "-At", "-h", "localhost", "-p", e.port, "-U", "rt8_scram", "-d", "postgres", "-c", "SELECT 1")
		cmd.Env = append(withoutPG(os.Environ()), "PGPASSWORD=secret", "PGSSLMODE=verify-full", "PGSSLROOTCERT="+ca.File,
			fmt.Sprintf("PGOPTIONS=-c fencegate.fence=rt8-scram -c fencegate.token=%d", tok))
		if out, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(out), "channel_binding") {
			t.Fatalf("psql (libpq defaults) over TLS through the listener, SCRAM: %v\n%s(want it to log in, or a FATAL naming channel_binding=disable)", err, out)
		}
	})
}
