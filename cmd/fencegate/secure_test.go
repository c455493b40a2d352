package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fencegate/fencegate/api/auth/authtest"
	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/election/embedded"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
)

// secureEnv is a real etcd and PostgreSQL with two fences' tables and
// roles, and certificates for a gateway and its callers.
type secureEnv struct {
	etcd  *embedded.Server
	pg    *throwaway.Server
	admin *pgx.Conn
	cli   *clientv3.Client
	ca    *authtest.CA
	srv   *authtest.Issued
	dir   string
}

func newSecureEnv(t *testing.T) *secureEnv {
	t.Helper()
	ctx := t.Context()
	e := &secureEnv{dir: t.TempDir()}
	var err error
	if e.pg, err = throwaway.Start(ctx, throwaway.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.pg.Close() })
	if e.etcd, err = embedded.Start(ctx, embedded.Config{Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.etcd.Close() })
	if e.cli, err = clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.cli.Close() })
	if e.admin, err = pgx.Connect(ctx, e.pg.DSN()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.admin.Close(context.WithoutCancel(ctx)) })
	if _, err := e.pg.RuntimeRole(ctx, "gw"); err != nil {
		t.Fatal(err)
	}
	// The PostgreSQL listener's clients log in as app, with no fencegate role.
	if _, err := e.pg.ListenerRole(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a", "b"} {
		for _, sql := range []string{
			fmt.Sprintf("CREATE TABLE %s_t (v text)", f),
			fmt.Sprintf("CREATE ROLE %s_writer NOLOGIN", f),
			fmt.Sprintf("GRANT SELECT, INSERT ON %s_t TO %s_writer", f, f),
		} {
			if _, err := e.admin.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		if err := migrations.GrantRole(ctx, e.admin, "gw", f+"_writer"); err != nil {
			t.Fatal(err)
		}
	}
	e.ca = authtest.NewCA(t, "fencegate-test")
	e.srv = e.ca.Localhost(t, "gateway")
	return e
}

// lead campaigns in election fence and returns the leader's token.
func (e *secureEnv) lead(t *testing.T, fence, name string) uint64 {
	t.Helper()
	s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	el := concurrency.NewElection(s, "/fencegate/elections/"+fence)
	if err := el.Campaign(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	return uint64(el.Rev())
}

func (e *secureEnv) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := e.admin.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *secureEnv) highWater(t *testing.T, fence string) uint64 {
	t.Helper()
	var hw uint64
	err := e.admin.QueryRow(t.Context(), "SELECT token FROM fencegate.fences WHERE name = $1", fence).Scan(&hw)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return hw
}

func (e *secureEnv) writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(e.dir, name)
	// Written beside, then renamed: a reader never sees half a file.
	if err := os.WriteFile(p+".tmp", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
	return p
}

// gateway is a running `fencegate serve`.
type gateway struct {
	grpcAddr, httpAddr string
	stderr             *syncBuffer
	stop               func() error
}

var servingRE = regexp.MustCompile(`grpc=(\S+) http=(\S+)`)

// serveGateway runs `fencegate serve` with args until the test ends.
func (e *secureEnv) serveGateway(t *testing.T, args ...string) *gateway {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	args = append([]string{
		"serve", "--etcd-endpoints=" + strings.Join(e.etcd.Endpoints(), ","),
		"--postgres-dsn=" + e.pg.DSNAs("gw"), "--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0",
	}, args...)
	g := &gateway{stderr: &syncBuffer{}}
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, args, io.Discard, g.stderr) }()
	var once sync.Once
	var stopErr error
	g.stop = func() error {
		once.Do(func() { cancel(); stopErr = <-errc })
		return stopErr
	}
	t.Cleanup(func() { _ = g.stop() })
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-errc:
			t.Fatalf("serve %v: %v\n%s", args, err, g.stderr.String())
		default:
		}
		if m := servingRE.FindStringSubmatch(g.stderr.String()); m != nil {
			g.grpcAddr, g.httpAddr = m[1], m[2]
			return g
		}
	}
	t.Fatalf("serve %v: did not start\n%s", args, g.stderr.String())
	return nil
}

func (e *secureEnv) client(t *testing.T, g *gateway, cert *authtest.Issued) fencegatev1.GatewayClient {
	t.Helper()
	conn, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(e.ca.ClientTLS(cert))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return fencegatev1.NewGatewayClient(conn)
}

func execSQL(ctx context.Context, c fencegatev1.GatewayClient, fence string, token uint64, sqls ...string) error {
	req := &fencegatev1.ExecRequest{Fence: fence}
	for _, s := range sqls {
		req.Statements = append(req.Statements, &fencegatev1.Statement{Sql: s})
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "fencing-token", fmt.Sprint(token))
	_, err := c.Exec(ctx, req)
	return err
}

// reasonOf is the ErrorInfo reason of a gRPC error, and its metadata.
func reasonOf(err error) (string, map[string]string) {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.Reason, ei.Metadata
		}
	}
	return "", nil
}

const securePolicy = `rules:
  - name: a-writers
    principals: ["spiffe://test/a/*"]
    fences: ["a"]
    actions: [sql.write, fence.read]
    postgres_role: a_writer
  - name: b-writers
    principals: ["spiffe://test/b/*"]
    fences: ["b"]
    actions: [sql.write, fence.read]
    postgres_role: b_writer
`

// TestSecureServe drives `fencegate serve` with mTLS and a policy as a
// client would: who may write which fence, what the database lets the
// policy's role do, a policy edited and broken while serving, and the
// audit trail. Each refusal leaves the tables and high-water marks as they
// were; the last subtest shows the same write accepted with the policy only
// in shadow mode, so the refusal is the policy's doing.
func TestSecureServe(t *testing.T) {
	e := newSecureEnv(t)
	ctx := t.Context()
	alice := e.ca.Issue(t, "alice", authtest.Leaf{URIs: []string{"spiffe://test/a/alice"}, Client: true})
	bob := e.ca.Issue(t, "bob", authtest.Leaf{URIs: []string{"spiffe://test/b/bob"}, Client: true})
	other := authtest.NewCA(t, "other")
	mallory := other.Issue(t, "mallory", authtest.Leaf{URIs: []string{"spiffe://test/a/mallory"}, Client: true})
	policyFile := e.writeFile(t, "policy.yaml", securePolicy)
	auditFile := filepath.Join(e.dir, "audit.log")

	g := e.serveGateway(t, "--cert-file="+e.srv.CertFile, "--key-file="+e.srv.KeyFile,
		"--trusted-ca-file="+e.ca.File, "--policy-file="+policyFile, "--audit-log="+auditFile)
	ta, tb := e.lead(t, "a", "alice"), e.lead(t, "b", "bob")
	ac, bc := e.client(t, g, alice), e.client(t, g, bob)

	if err := execSQL(ctx, ac, "a", ta, "INSERT INTO a_t VALUES ('alice')"); err != nil {
		t.Fatalf("alice writes a: %v", err)
	}
	if err := execSQL(ctx, bc, "b", tb, "INSERT INTO b_t VALUES ('bob')"); err != nil {
		t.Fatalf("bob writes b: %v", err)
	}
	hwA, hwB := e.highWater(t, "a"), e.highWater(t, "b")

	t.Run("no certificate, or one from another CA, gets no connection", func(t *testing.T) {
		for name, c := range map[string]fencegatev1.GatewayClient{"none": e.client(t, g, nil), "other CA": func() fencegatev1.GatewayClient {
			conn, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
				RootCAs: e.ca.Pool(), Certificates: []tls.Certificate{mallory.TLS},
			})))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return fencegatev1.NewGatewayClient(conn)
		}()} {
			err := execSQL(ctx, c, "a", ta, "INSERT INTO a_t VALUES ('mallory')")
			if err == nil {
				t.Errorf("%s: write accepted, want the handshake refused", name)
			}
		}
		// Plain HTTP to the TLS port is not served either.
		if resp, err := http.Get("http://" + g.httpAddr + "/v1/fences"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("plain HTTP: got 200, want no answer")
			}
		}
	})

	t.Run("a writer of a writing b is not authorized", func(t *testing.T) {
		// With b's current token: only the policy stands in the way.
		err := execSQL(ctx, ac, "b", tb, "INSERT INTO b_t VALUES ('alice')")
		reason, md := reasonOf(err)
		if reason != "NOT_AUTHORIZED" || status.Code(err).String() != "PermissionDenied" ||
			md["principal"] != "spiffe://test/a/alice" || md["action"] != "sql.write" {
			t.Errorf("got %v (reason %q, metadata %v), want NOT_AUTHORIZED for spiffe://test/a/alice, sql.write", err, reason, md)
		}
		_, err = ac.GetFence(ctx, &fencegatev1.GetFenceRequest{Fence: "b"})
		if reason, _ := reasonOf(err); reason != "NOT_AUTHORIZED" {
			t.Errorf("alice reads fence b: got %v, want NOT_AUTHORIZED", err)
		}
		list, err := ac.ListFences(ctx, &fencegatev1.ListFencesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range list.GetFences() {
			names = append(names, f.GetName())
		}
		if strings.Join(names, ",") != "a" {
			t.Errorf("alice lists fences: got %v, want only a", names)
		}
	})

	t.Run("statements run with the rule's role only", func(t *testing.T) {
		err := execSQL(ctx, ac, "a", ta, "INSERT INTO a_t VALUES ('alice 2')", "INSERT INTO b_t VALUES ('alice')")
		if reason, md := reasonOf(err); reason != "STATEMENT_FAILED" || md["sqlstate"] != "42501" {
			t.Errorf("a_writer writes b_t: got %v, want STATEMENT_FAILED 42501", err)
		}
		for _, sqls := range [][]string{
			{"RESET ROLE", "INSERT INTO b_t VALUES ('alice')"},
			{"SET ROLE b_writer", "INSERT INTO b_t VALUES ('alice')"},
			{"SELECT set_config('role', 'b_writer', true)", "INSERT INTO b_t VALUES ('alice')"},
			{"SET SESSION AUTHORIZATION b_writer", "INSERT INTO b_t VALUES ('alice')"},
		} {
			err := execSQL(ctx, ac, "a", ta, sqls...)
			if err == nil {
				t.Errorf("%q: accepted, want refused", sqls)
			}
		}
	})

	if n := e.count(t, "b_t"); n != 1 {
		t.Errorf("b_t holds %d rows, want bob's 1", n)
	}
	if n := e.count(t, "a_t"); n != 1 {
		t.Errorf("a_t holds %d rows, want alice's 1", n)
	}
	if a, b := e.highWater(t, "a"), e.highWater(t, "b"); a != hwA || b != hwB {
		t.Errorf("high-water marks a=%d b=%d, want unchanged %d %d", a, b, hwA, hwB)
	}

	t.Run("an edited policy takes effect, an invalid one keeps the old", func(t *testing.T) {
		e.writeFile(t, "policy.yaml", securePolicy+`  - name: alice-helps-b
    principals: ["spiffe://test/a/alice"]
    fences: ["b"]
    actions: [sql.write]
    postgres_role: b_writer
`)
		waitFor(t, "the edited policy", func() bool {
			return execSQL(ctx, ac, "b", tb, "INSERT INTO b_t VALUES ('alice helps')") == nil
		})
		e.writeFile(t, "policy.yaml", "rules:\n  - name: broken\n    principals: [\"*\"]\n    fences: [\"*\"]\n    actions: [sql.wirte]\n")
		hc := httpsClient(e.ca.ClientTLS(alice))
		waitFor(t, "fencegate_policy_valid 0", func() bool {
			return strings.Contains(httpGet(t, hc, "https://"+g.httpAddr+"/metrics"), "fencegate_policy_valid 0")
		})
		if err := execSQL(ctx, ac, "b", tb, "INSERT INTO b_t VALUES ('alice helps again')"); err != nil {
			t.Errorf("after an invalid policy: got %v, want the old policy's allow", err)
		}
		if err := execSQL(ctx, bc, "a", ta, "INSERT INTO a_t VALUES ('bob')"); err == nil {
			t.Errorf("after an invalid policy: bob writes a, want refused by the old policy")
		}
		e.writeFile(t, "policy.yaml", securePolicy)
		waitFor(t, "the original policy", func() bool {
			reason, _ := reasonOf(execSQL(ctx, ac, "b", tb, "SELECT 1"))
			return reason == "NOT_AUTHORIZED"
		})
	})

	t.Run("a rotated server certificate is served without a restart", func(t *testing.T) {
		before := serverSerial(t, g.grpcAddr, e.ca.ClientTLS(alice))
		next := e.ca.Localhost(t, "gateway-next")
		e.writeFile(t, filepath.Base(e.srv.KeyFile)+".new", string(next.KeyPEM))
		// Key first, then certificate: fencegate keeps the old pair until
		// the two match.
		if err := os.Rename(filepath.Join(e.dir, filepath.Base(e.srv.KeyFile)+".new"), e.srv.KeyFile); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(e.srv.CertFile, next.CertPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the new certificate", func() bool {
			return serverSerial(t, g.grpcAddr, e.ca.ClientTLS(alice)) == next.Cert.SerialNumber.String()
		})
		if before == next.Cert.SerialNumber.String() {
			t.Fatalf("serial %s before the rotation too", before)
		}
		if err := execSQL(ctx, ac, "a", ta, "SELECT 1"); err != nil {
			t.Errorf("write over the connection made before the rotation: %v", err)
		}
	})

	t.Run("a reset needs fence.admin", func(t *testing.T) {
		_, err := ac.ResetFence(ctx, &fencegatev1.ResetFenceRequest{Fence: "a", HighWater: proto.Uint64(1)})
		if reason, md := reasonOf(err); reason != "NOT_AUTHORIZED" || md["action"] != "fence.admin" {
			t.Fatalf("alice resets fence a: got %v, want NOT_AUTHORIZED for fence.admin", err)
		}
	})

	t.Run("the audit log holds each decision", func(t *testing.T) {
		if err := g.stop(); err != nil {
			t.Fatalf("serve: %v", err)
		}
		recs := readAudit(t, auditFile)
		var accepted, refused, overGRPC, resets int
		for _, r := range recs {
			switch r["protocol"] {
			case "grpc":
				overGRPC++
			case "http":
			default:
				t.Errorf("record %v: protocol %v, want grpc or http", r, r["protocol"])
			}
			switch {
			case r["action"] == "fence.admin":
				resets++
				if r["outcome"] != "NOT_AUTHORIZED" || r["principal"] != "spiffe://test/a/alice" || r["fence"] != "a" {
					t.Errorf("reset record %v: want alice's refused reset of a", r)
				}
			case r["outcome"] == "accepted" && r["principal"] == "spiffe://test/a/alice" && r["fence"] == "a" && r["role"] == "a_writer":
				accepted++
			case r["outcome"] == "NOT_AUTHORIZED" && r["principal"] == "spiffe://test/a/alice" && r["fence"] == "b":
				refused++
				if r["action"] == "sql.write" && r["token"] != float64(tb) {
					t.Errorf("NOT_AUTHORIZED record %v: token %v, want the %d sent", r, r["token"], tb)
				}
			}
			if s, _ := r["statements_sha256"].(string); r["action"] == "sql.write" && len(s) != 64 {
				t.Errorf("record %v: statements_sha256 %q, want a SHA-256", r, s)
			}
			for _, secret := range []string{"alice helps", "INSERT"} {
				if strings.Contains(fmt.Sprint(r), secret) {
					t.Errorf("record %v holds statement text %q", r, secret)
				}
			}
		}
		if accepted == 0 || refused == 0 {
			t.Errorf("audit log of %d records: %d accepted writes of alice to a, %d refusals of alice on b; want both > 0", len(recs), accepted, refused)
		}
		if overGRPC == 0 {
			t.Errorf("audit log of %d records: none with protocol grpc, want the gRPC writes' records", len(recs))
		}
		if resets != 1 {
			t.Errorf("audit log of %d records: %d fence.admin records, want alice's refused reset", len(recs), resets)
		}
	})

	t.Run("with the policy in shadow mode the same write goes through", func(t *testing.T) {
		shadow := e.serveGateway(t, "--cert-file="+e.srv.CertFile, "--key-file="+e.srv.KeyFile,
			"--trusted-ca-file="+e.ca.File, "--policy-file="+policyFile, "--policy-mode=shadow")
		before := e.count(t, "b_t")
		// alice's rule has no role for b: in shadow mode the write runs as
		// fencegate's own login, as the warning in --help says.
		if err := execSQL(ctx, e.client(t, shadow, alice), "b", tb, "INSERT INTO b_t VALUES ('shadow')"); err != nil {
			t.Fatalf("shadow mode: %v", err)
		}
		if got := e.count(t, "b_t"); got != before+1 {
			t.Errorf("b_t: %d rows, want %d", got, before+1)
		}
		if !strings.Contains(shadow.stderr.String(), "policy would refuse") {
			t.Errorf("shadow mode logged no would-be refusal:\n%s", shadow.stderr.String())
		}
	})
}

// TestBearerTokens: callers without a client certificate name themselves
// with a bearer token from --token-auth-file; none, or a wrong one, is
// UNAUTHENTICATED over gRPC and HTTP and writes nothing. A certificate
// from another CA is still refused at the handshake.
func TestBearerTokens(t *testing.T) {
	e := newSecureEnv(t)
	ctx := t.Context()
	sum := sha256.Sum256([]byte("cron-secret"))
	tokensFile := e.writeFile(t, "tokens", "# name sha256(secret)\ncron "+hex.EncodeToString(sum[:])+"\n")
	policyFile := e.writeFile(t, "policy.yaml", `rules:
  - name: cron
    principals: ["token:cron"]
    fences: ["a"]
    actions: [sql.write]
    postgres_role: a_writer
`)
	// With a CA too: a client shows a certificate or a token.
	g := e.serveGateway(t, "--cert-file="+e.srv.CertFile, "--key-file="+e.srv.KeyFile, "--trusted-ca-file="+e.ca.File,
		"--token-auth-file="+tokensFile, "--policy-file="+policyFile)
	ta := e.lead(t, "a", "cron")
	c := e.client(t, g, nil)
	bearer := func(secret string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+secret)
	}
	for name, cctx := range map[string]context.Context{"no token": ctx, "wrong token": bearer("guess"), "hash as token": bearer(hex.EncodeToString(sum[:]))} {
		err := execSQL(cctx, c, "a", ta, "INSERT INTO a_t VALUES ('anonymous')")
		if reason, _ := reasonOf(err); reason != "UNAUTHENTICATED" || status.Code(err).String() != "Unauthenticated" {
			t.Errorf("%s: got %v, want UNAUTHENTICATED", name, err)
		}
	}
	if err := execSQL(bearer("cron-secret"), c, "a", ta, "INSERT INTO a_t VALUES ('cron')"); err != nil {
		t.Errorf("cron's token: %v", err)
	}
	other := authtest.NewCA(t, "other")
	stranger := other.Issue(t, "stranger", authtest.Leaf{URIs: []string{"spiffe://test/a/x"}, Client: true})
	if err := execSQL(bearer("cron-secret"), func() fencegatev1.GatewayClient {
		// Sent whatever CAs the server asks for (Go's client would
		// otherwise send none).
		conn, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: e.ca.Pool(),
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return &stranger.TLS, nil
			},
		})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return fencegatev1.NewGatewayClient(conn)
	}(), "a", ta, "INSERT INTO a_t VALUES ('stranger')"); err == nil {
		t.Errorf("another CA's certificate with cron's token: accepted, want the handshake refused")
	}

	hc := httpsClient(e.ca.ClientTLS(nil))
	post := func(auth, principal string) int {
		req, err := http.NewRequestWithContext(ctx, "POST", "https://"+g.httpAddr+"/v1/fences/a/sql",
			strings.NewReader(`{"statements":[{"sql":"INSERT INTO a_t VALUES ('http')"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Fencing-Token", fmt.Sprint(ta))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if principal != "" {
			// Headers a client might hope name it: ignored.
			req.Header.Set("Grpc-Metadata-X-Fencegate-Principal", principal)
			req.Header.Set("X-Forwarded-Client-Cert", "URI="+principal)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("", "token:cron"); got != http.StatusUnauthorized {
		t.Errorf("HTTP without a token, spoofed principal headers: got %d, want 401", got)
	}
	if got := post("Bearer guess", ""); got != http.StatusUnauthorized {
		t.Errorf("HTTP with a wrong token: got %d, want 401", got)
	}
	if got := post("Bearer cron-secret", ""); got != http.StatusOK {
		t.Errorf("HTTP with cron's token: got %d, want 200", got)
	}
	if n := e.count(t, "a_t"); n != 2 {
		t.Errorf("a_t holds %d rows, want cron's 2", n)
	}
	// Counted like every other refusal: 3 over gRPC, 2 over HTTP. (The
	// fence label is "_other" for those refused before the watch delivered
	// fence a's term.)
	metrics := httpGet(t, hc, "https://"+g.httpAddr+"/metrics")
	for _, want := range []string{
		`fencegate_requests_total{backend="postgres",outcome="unauthenticated"} 5`,
		`reason="unauthenticated"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(metrics, "unauthenticated"))
		}
	}
}

// TestInFlightBound: writes past --max-in-flight are refused with
// OVERLOADED while the others complete, and the gateway keeps serving.
func TestInFlightBound(t *testing.T) {
	e := newSecureEnv(t)
	ctx := t.Context()
	g := e.serveGateway(t, "--max-in-flight=2")
	ta := e.lead(t, "a", "w")
	conn, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := fencegatev1.NewGatewayClient(conn)
	const n = 12
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = execSQL(ctx, c, "a", ta, "SELECT pg_sleep(0.5)") })
	}
	wg.Wait()
	var ok, overloaded int
	for _, err := range errs {
		reason, _ := reasonOf(err)
		switch {
		case err == nil:
			ok++
		case reason == "OVERLOADED" && status.Code(err).String() == "ResourceExhausted":
			overloaded++
		default:
			t.Errorf("got %v, want success or OVERLOADED", err)
		}
	}
	if ok == 0 || overloaded == 0 || ok > 2*3 {
		t.Errorf("%d accepted, %d OVERLOADED of %d concurrent slow writes; want both, and at most a few accepted", ok, overloaded, n)
	}
	if err := execSQL(ctx, c, "a", ta, "SELECT 1"); err != nil {
		t.Errorf("after the burst: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func httpsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func httpGet(t *testing.T, hc *http.Client, url string) string {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// serverSerial is the serial number of the certificate a new TLS
// connection to addr is served.
func serverSerial(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func readAudit(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
