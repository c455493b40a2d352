package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/migrations"
)

// The secure paths go through a second gateway, serving as a deployment
// should: TLS on both listeners, a client certificate required (mTLS), a
// policy that lets the bench's principal write its fences, and SQL run as
// a NOLOGIN writer role (postgres_role). The plain gateway runs beside it
// in the same run, so the ratio of a secure path over its plain twin is
// what TLS plus the policy cost.

// The paths through the secure gateway, and their plain twins.
const (
	pgGRPCSecure    = "pg-grpc-secure"
	pgHTTPSecure    = "pg-http-secure"
	redisGRPCSecure = "redis-grpc-secure"
	redisHTTPSecure = "redis-http-secure"
)

// benchPrincipal is the URI SAN of the bench's client certificate.
const benchPrincipal = "spiffe://fencebench/client"

// benchWriterRole is the role the secure gateway runs the bench's SQL as.
const benchWriterRole = "bench_writer"

// secure reports whether path goes through the secure gateway.
func secure(path string) bool { return strings.HasSuffix(path, "-secure") }

// plainTwin is the path without "-secure".
func plainTwin(path string) string { return strings.TrimSuffix(path, "-secure") }

// benchPKI is the secure gateway's files and the bench's client TLS.
type benchPKI struct {
	cert, key, ca string // the gateway's certificate and the CA it trusts
	policy        string
	client        *tls.Config
}

// newBenchPKI makes a CA, the gateway's certificate for 127.0.0.1, the
// bench's client certificate and the policy, under dir.
func newBenchPKI(dir string) (*benchPKI, error) {
	var p *benchPKI
	err := authtest.Make(dir, func(t authtest.T) {
		ca := authtest.NewCA(t, "fencebench")
		srv := ca.Localhost(t, "gateway")
		cl := ca.Issue(t, "client", authtest.Leaf{CommonName: "fencebench", URIs: []string{benchPrincipal}, Client: true})
		p = &benchPKI{cert: srv.CertFile, key: srv.KeyFile, ca: ca.File, policy: filepath.Join(dir, "policy.yaml"), client: ca.ClientTLS(cl)}
	})
	if err != nil {
		return nil, err
	}
	// Real policies hold more than one rule; the bench's is matched first,
	// as a deployment's busiest rule would be placed.
	pol := fmt.Sprintf(`rules:
  - name: bench
    principals: [%q]
    fences: ["bench-*"]
    actions: [sql.write, redis.write, fence.read]
    postgres_role: %s
  - name: ops-read
    principals: ["cn:ops-*"]
    fences: ["*"]
    actions: [fence.read]
  - name: freeze
    effect: deny
    principals: ["*"]
    fences: ["frozen-*"]
    actions: [sql.write, redis.write]
`, benchPrincipal, benchWriterRole)
	if err := os.WriteFile(p.policy, []byte(pol), 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

// args are the secure gateway's flags.
func (p *benchPKI) args() []string {
	return []string{"--cert-file=" + p.cert, "--key-file=" + p.key, "--trusted-ca-file=" + p.ca, "--policy-file=" + p.policy}
}

// grantBenchWriter creates the writer role, allowed to append to
// bench_ledger only, and lets the gateway's login become it.
func grantBenchWriter(ctx context.Context, conn *pgx.Conn, login string) error {
	r := pgx.Identifier{benchWriterRole}.Sanitize()
	for _, sql := range []string{
		"CREATE ROLE " + r + " NOLOGIN",
		"GRANT INSERT ON bench_ledger TO " + r,
		"GRANT USAGE ON SEQUENCE bench_ledger_id_seq TO " + r,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return migrations.GrantRole(ctx, conn, login, benchWriterRole)
}
