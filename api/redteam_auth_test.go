package api_test

// Red-team tests of authentication and authorization (API.md,
// "Authentication and authorization"; docs/SECURITY.md): every way in
// (gRPC, HTTP, the PostgreSQL listener, the RESP listener) wired as serve
// wires it, with TLS, a CA, a token file and a policy file. Each test
// asserts the safe outcome; a failing test is a hole.

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/api/auth"
	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/api/pgwire"
	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/proxy/redis"
)

// rtEnv is one fencegate with every way in, as serve wires them:
// ServerTLS (client certificates verified if given, since a token file
// is set), the Authenticator's interceptors and HTTP middleware, a
// policy.Store, and the pipeline with AuthRequired.
type rtEnv struct {
	ca         *rtCA
	dir        string
	policyFile string
	tokenFile  string
	store      *policy.Store
	authn      *auth.Authenticator
	clock      *atomic.Int64 // the Authenticator's clock, unix nanoseconds
	grpcAddr   string
	httpAddr   string
	pgAddr     string
	respAddr   string
	cli        *clientv3.Client
	admin      *pgx.Conn
	id         string // unique per env: fence and role names
}

// rtSecret is the bearer secret of token name in every env.
func rtSecret(name string) string { return "rt-secret-" + name + "-0123456789abcdef0123456789abcdef" }

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// startRT starts an env whose policy is policyYAML with every "@" replaced
// by the env's id, and whose token file lists tokenNames.
func startRT(t *testing.T, policyYAML string, tokenNames ...string) *rtEnv {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	var idb [3]byte
	_, _ = rand.Read(idb[:])
	e := &rtEnv{dir: t.TempDir(), id: "rt" + hex.EncodeToString(idb[:])}
	e.ca = newRTCA(t, e.dir)
	srvCertFile, srvKeyFile := e.ca.files(t, e.dir, "server", e.ca.issue(t, rtLeaf{
		CN: "server", DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		EKU: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}))

	e.policyFile = filepath.Join(e.dir, "policy.yaml")
	e.writePolicy(t, policyYAML)
	var tf strings.Builder
	for _, n := range tokenNames {
		fmt.Fprintf(&tf, "%s %s\n", n, sha256Hex(rtSecret(n)))
	}
	e.tokenFile = filepath.Join(e.dir, "tokens")
	if err := os.WriteFile(e.tokenFile, []byte(tf.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	st, err := auth.NewServerTLS(auth.TLSFiles{CertFile: srvCertFile, KeyFile: srvKeyFile, TrustedCAFile: e.ca.file, ClientCertOptional: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.clock = &atomic.Int64{}
	e.clock.Store(time.Now().UnixNano())
	e.authn, err = auth.NewAuthenticator(true, e.tokenFile, nil, auth.WithClock(func() time.Time { return time.Unix(0, e.clock.Load()) }))
	if err != nil {
		t.Fatal(err)
	}
	e.store, err = policy.NewStore(e.policyFile, policy.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}

	e.cli = newEtcdClient(t)
	w, err := election.NewWatcher(e.cli, election.WatcherConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = w.Run(wctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	waitFor(t, "watch synced", w.Synced)

	pg, err := postgres.Open(ctx, pgDSN, postgres.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	if err := pg.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rd, err := redis.Open(ctx, redisAddr, redis.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	gw, err := proxy.New(proxy.DefaultConfig(), proxy.Options{
		Terms: w, Postgres: pg, Redis: rd, Policy: e.store, AuthRequired: e.authn.Required(), Protocol: api.ProtocolOf,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewServer(gw, 64<<10)

	// gRPC, as serve: TLS credentials and the Authenticator's interceptors.
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(e.authn.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(e.authn.StreamServerInterceptor()),
		grpc.Creds(credentials.NewTLS(st.Config())),
	)
	srv.Register(gs)
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.grpcAddr = glis.Addr().String()
	wg.Add(1)
	go func() { defer wg.Done(); _ = gs.Serve(glis) }()
	t.Cleanup(gs.Stop)

	// HTTP, as serve: the middleware outermost, TLS listener.
	h, err := srv.HTTPHandler(ctx, api.HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	hs := api.NewHTTPServer(e.authn.HTTPMiddleware(h), api.DefaultHTTPServerConfig())
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.httpAddr = hlis.Addr().String()
	hdone := make(chan struct{})
	go func() { defer close(hdone); _ = hs.Serve(tls.NewListener(hlis, st.Config())) }()
	t.Cleanup(func() { _ = hs.Close(); <-hdone })

	// The PostgreSQL listener.
	pgs, err := pgwire.New(gw, pgwire.Config{PostgresDSN: pgDSN, TLS: pgwire.TLSFrom(st.Config()), Sessions: pg})
	if err != nil {
		t.Fatal(err)
	}
	plis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.pgAddr = plis.Addr().String()
	pdone := make(chan struct{})
	go func() { defer close(pdone); _ = pgs.Serve(plis) }()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(ctx, 5*time.Second)
		defer c()
		_ = pgs.Shutdown(sctx)
		<-pdone
	})

	// The RESP listener.
	rs, err := resp.New(gw, resp.Config{TLS: st.Config()})
	if err != nil {
		t.Fatal(err)
	}
	rlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.respAddr = rlis.Addr().String()
	rdone := make(chan struct{})
	go func() { defer close(rdone); _ = rs.Serve(rlis) }()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(ctx, 5*time.Second)
		defer c()
		_ = rs.Shutdown(sctx)
		<-rdone
	})

	e.admin, err = pgx.Connect(ctx, pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.admin.Close(ctx) })
	return e
}

func (e *rtEnv) expand(s string) string { return strings.ReplaceAll(s, "@", e.id) }

// writePolicy writes the policy file and puts it in force (as the
// once-a-second poll or SIGHUP would); the error is Reload's.
func (e *rtEnv) writePolicy(t *testing.T, yaml string) error {
	t.Helper()
	tmp := e.policyFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(e.expand(yaml)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, e.policyFile); err != nil {
		t.Fatal(err)
	}
	if e.store == nil {
		return nil
	}
	return e.store.Reload()
}

// sql runs admin statements, each with "@" expanded.
func (e *rtEnv) sql(t *testing.T, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := e.admin.Exec(t.Context(), e.expand(s)); err != nil {
			t.Fatalf("%s: %v", e.expand(s), err)
		}
	}
}

// role creates a NOLOGIN role (for postgres_role), or a LOGIN role for the
// PostgreSQL listener (it needs no fencegate role), unless it exists.
func (e *rtEnv) role(t *testing.T, name string, login bool) {
	t.Helper()
	kind := "NOLOGIN"
	if login {
		kind = "LOGIN"
	}
	var exists bool
	if err := e.admin.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		e.sql(t, "CREATE ROLE "+pgx.Identifier{name}.Sanitize()+" "+kind)
	}
}

func (e *rtEnv) lead(t *testing.T, fence string) string {
	t.Helper()
	l := campaign(t, e.cli, fence, "leader-"+fence)
	return strconv.FormatInt(l.token, 10)
}

// cert issues a client certificate.
func (e *rtEnv) cert(t *testing.T, _ string, l rtLeaf) *tls.Certificate {
	t.Helper()
	if l.EKU == nil {
		l.EKU = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	c := e.ca.issue(t, l)
	return &c
}

// clientTLS trusts the env's CA and presents c (nil: no certificate).
func (e *rtEnv) clientTLS(c *tls.Certificate) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(e.ca.cert)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if c != nil {
		cfg.Certificates = []tls.Certificate{*c}
	}
	return cfg
}

// rtCA is a CA whose key the tests hold, to sign what authtest will not
// (not yet valid certificates, say).
type rtCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

type rtLeaf struct {
	CN        string
	DNS       []string
	IPs       []net.IP
	URIs      []string
	NotBefore time.Time
	NotAfter  time.Time
	EKU       []x509.ExtKeyUsage
	Parent    *x509.Certificate // default: the CA
	ParentKey *ecdsa.PrivateKey
	Chain     [][]byte // sent after the leaf
}

var rtSerial atomic.Int64

func newRTCA(t *testing.T, dir string) *rtCA {
	t.Helper()
	k := mustKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(rtSerial.Add(1)), Subject: pkix.Name{CommonName: "rt CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &rtCA{cert: c, key: k, file: filepath.Join(dir, "ca.pem")}
	if err := os.WriteFile(ca.file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return ca
}

func (ca *rtCA) issue(t *testing.T, l rtLeaf) tls.Certificate {
	t.Helper()
	k := mustKey(t)
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(rtSerial.Add(1)), Subject: pkix.Name{CommonName: l.CN},
		NotBefore: l.NotBefore, NotAfter: l.NotAfter, DNSNames: l.DNS, IPAddresses: l.IPs,
		ExtKeyUsage: l.EKU, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	for _, s := range l.URIs {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	parent, pk := ca.cert, ca.key
	if l.Parent != nil {
		parent, pk = l.Parent, l.ParentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &k.PublicKey, pk)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: append([][]byte{der}, l.Chain...), PrivateKey: k, Leaf: leaf}
}

// files writes c as PEM files and returns their paths.
func (ca *rtCA) files(t *testing.T, dir, name string, c tls.Certificate) (string, string) {
	t.Helper()
	kd, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cf, kf
}

// grpcClient dials the gRPC port with cert (nil: none).
func (e *rtEnv) grpcClient(t *testing.T, cfg *tls.Config) fencegatev1.GatewayClient {
	t.Helper()
	conn, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return fencegatev1.NewGatewayClient(conn)
}

// httpClient talks to the HTTP port with cfg's TLS.
func (e *rtEnv) httpClient(t *testing.T, cfg *tls.Config) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// rtReason is the fencegate reason of a gRPC error ("" for nil, the code
// name when there is no ErrorInfo: a handshake failure, say).
func rtReason(err error) string {
	if err == nil {
		return ""
	}
	st, ok := status.FromError(err)
	if !ok {
		return "error: " + err.Error()
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.Reason
		}
	}
	return "code " + st.Code().String() + ": " + st.Message()
}

func rtExec(ctx context.Context, c fencegatev1.GatewayClient, fence, token string, md ...string) (*fencegatev1.ExecResponse, error) {
	pairs := append([]string{"fencing-token", token}, md...)
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, metadata.Pairs(pairs...)), 10*time.Second)
	defer cancel()
	return c.Exec(ctx, &fencegatev1.ExecRequest{Fence: fence, Statements: []*fencegatev1.Statement{{Sql: "SELECT 1"}}})
}

// rtHTTP sends one request; hdr are header pairs (a name may repeat).
// It returns the status and the ErrorInfo reason, "" when none.
func rtHTTP(t *testing.T, c *http.Client, method, rawURL, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, rawURL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return -1, "error: " + err.Error()
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var b struct {
		Details []struct {
			Type   string `json:"@type"`
			Reason string `json:"reason"`
		} `json:"details"`
	}
	_ = json.Unmarshal(raw, &b)
	for _, d := range b.Details {
		if d.Type == "type.googleapis.com/google.rpc.ErrorInfo" {
			return res.StatusCode, d.Reason
		}
	}
	return res.StatusCode, ""
}

// pgConnect connects to the PostgreSQL listener as user, in fence with
// token; tlsCfg nil is sslmode=disable.
func (e *rtEnv) pgConnect(t *testing.T, user, fence, token string, tlsCfg *tls.Config) (*pgx.Conn, error) {
	t.Helper()
	mode := "disable"
	if tlsCfg != nil {
		mode = "require"
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://%s@%s/postgres?sslmode=%s&fencegate.fence=%s&fencegate.token=%s",
		url.PathEscape(user), e.pgAddr, mode, fence, token))
	if err != nil {
		t.Fatal(err)
	}
	cfg.TLSConfig = tlsCfg
	cfg.Fallbacks = nil
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		t.Cleanup(func() { c.Close(context.WithoutCancel(t.Context())) })
	}
	return c, err
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code + " " + pe.Message
	}
	if err == nil {
		return ""
	}
	return "error: " + err.Error()
}

// respConn is a raw RESP client over TLS.
type respConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func (e *rtEnv) respDial(t *testing.T, cfg *tls.Config) *respConn {
	t.Helper()
	c, err := tls.Dial("tcp", e.respAddr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &respConn{t: t, c: c, br: bufio.NewReader(c)}
}

// do sends one command and returns the first line of its reply (bulk and
// array contents are read and dropped).
func (r *respConn) do(args ...string) string {
	r.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := r.c.Write([]byte(b.String())); err != nil {
		r.t.Fatal(err)
	}
	return r.read()
}

func (r *respConn) read() string {
	r.t.Helper()
	line, err := r.br.ReadString('\n')
	if err != nil {
		r.t.Fatalf("RESP read: %v", err)
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "$"):
		n, _ := strconv.Atoi(line[1:])
		if n >= 0 {
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r.br, buf); err != nil {
				r.t.Fatal(err)
			}
			return string(buf[:n])
		}
	case strings.HasPrefix(line, "*"), strings.HasPrefix(line, "%"):
		n, _ := strconv.Atoi(line[1:])
		if line[0] == '%' {
			n *= 2
		}
		for range n {
			r.read()
		}
	}
	return line
}

// ---------------------------------------------------------------------------

// TestRedTeamAuthPgwireLongUserEvadesDeny: on the PostgreSQL listener the
// principal is postgres:<user> with <user> as the startup packet spelled
// it, but PostgreSQL silently truncates a user name to 63 bytes
// (NAMEDATALEN-1) and logs the client in as the truncated role. A login
// role cut off with an exact `effect: deny` rule (SECURITY.md: "cut one
// off at once with an effect: deny rule for its principal") connects as
// <role>x, is logged in as <role>, and its principal no longer matches
// the deny rule: it writes.
func TestRedTeamAuthPgwireLongUserEvadesDeny(t *testing.T) {
	e := startRT(t, `rules: []`)
	// A 63-byte login role, the longest PostgreSQL keeps.
	role := e.id + "_" + strings.Repeat("w", 63-len(e.id)-1)
	if len(role) != 63 {
		t.Fatalf("role name is %d bytes", len(role))
	}
	e.role(t, role, true)
	fence := e.id + "-pg"
	e.sql(t, "CREATE TABLE @_pg (v text)", "GRANT INSERT, SELECT ON @_pg TO "+pgx.Identifier{role}.Sanitize())
	if err := e.writePolicy(t, `rules:
  - name: pg-workers
    principals: ["postgres:*"]
    fences: ["`+fence+`"]
    actions: [sql.write]
  - name: cut-off
    effect: deny
    principals: ["postgres:`+role+`"]
    fences: ["*"]
    actions: [sql.write]
`); err != nil {
		t.Fatal(err)
	}
	tok := e.lead(t, fence)
	write := func(user string) string {
		c, err := e.pgConnect(t, user, fence, tok, nil)
		if err != nil {
			return "connect: " + pgCode(err)
		}
		var who string
		if err := c.QueryRow(t.Context(), "SELECT session_user::text").Scan(&who); err != nil {
			return pgCode(err)
		}
		_, err = c.Exec(t.Context(), e.expand("INSERT INTO @_pg VALUES ('"+user+"')"))
		if err != nil {
			return pgCode(err)
		}
		return "written, logged in as " + who
	}
	if got := write(role); !strings.HasPrefix(got, "42501 fencegate: NOT_AUTHORIZED") {
		t.Fatalf("control: the cut-off role itself: got %q, want NOT_AUTHORIZED", got)
	}
	for _, user := range []string{role + "x", role + "-admin", role + strings.Repeat("z", 40)} {
		if got := write(user); !strings.HasPrefix(got, "42501 fencegate: NOT_AUTHORIZED") && !strings.HasPrefix(got, "connect: ") {
			t.Errorf("HOLE: user %q (PostgreSQL logs in as the first 63 bytes, %q, which a deny rule cuts off): got %q, want NOT_AUTHORIZED or no login",
				user, role, got)
		}
	}
	var n int
	if err := e.admin.QueryRow(t.Context(), e.expand("SELECT count(*) FROM @_pg")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("HOLE: %d rows written by a role a deny rule cut off", n)
	}
}

// TestRedTeamAuthSpoofedIdentity: nothing a client sets names it. Without
// a certificate or bearer token, headers and metadata that name a
// principal or carry a bearer secret by another name get UNAUTHENTICATED;
// with a certificate no rule names, they do not lift it to another
// principal.
func TestRedTeamAuthSpoofedIdentity(t *testing.T) {
	e := startRT(t, `rules:
  - name: writer
    principals: ["spiffe://rt/@/writer", "token:cron"]
    fences: ["@-a"]
    actions: [sql.write, redis.write, fence.read]
    postgres_role: @_a_writer
`, "cron")
	e.role(t, e.id+"_a_writer", false)
	fence := e.id + "-a"
	tok := e.lead(t, fence)
	writer := e.cert(t, "writer", rtLeaf{URIs: []string{"spiffe://rt/" + e.id + "/writer"}})
	nobody := e.cert(t, "nobody", rtLeaf{URIs: []string{"spiffe://rt/" + e.id + "/nobody"}})
	// a certificate whose CN looks like the writer's URI, and one whose
	// DNS SAN does.
	cnLike := e.cert(t, "cnlike", rtLeaf{CN: "spiffe://rt/" + e.id + "/writer"})
	dnsLike := e.cert(t, "dnslike", rtLeaf{DNS: []string{"writer." + e.id}, CN: "spiffe://rt/" + e.id + "/writer"})

	// Controls: the writer by certificate and by bearer secret.
	if _, err := rtExec(t.Context(), e.grpcClient(t, e.clientTLS(writer)), fence, tok); err != nil {
		t.Fatalf("control: the writer's certificate: %v", err)
	}
	if _, err := rtExec(t.Context(), e.grpcClient(t, e.clientTLS(nil)), fence, tok, "authorization", "Bearer "+rtSecret("cron")); err != nil {
		t.Fatalf("control: the writer's bearer secret: %v", err)
	}

	spoofMD := [][]string{
		{"x-forwarded-client-cert", "By=spiffe://rt/x;URI=spiffe://rt/" + e.id + "/writer"},
		{"x-fencegate-principal", "spiffe://rt/" + e.id + "/writer"},
		{"principal", "spiffe://rt/" + e.id + "/writer"},
		{"x-remote-user", "token:cron"},
		{"grpcgateway-authorization", "Bearer " + rtSecret("cron")},
		{"x-authorization", "Bearer " + rtSecret("cron")},
		{"proxy-authorization", "Bearer " + rtSecret("cron")},
		{"authorization-bin", "Bearer " + rtSecret("cron")},
		{":authority", "spiffe://rt/" + e.id + "/writer"},
		{"fencing-principal", "token:cron"},
	}
	for _, who := range []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"no certificate", e.clientTLS(nil), "UNAUTHENTICATED"},
		{"a certificate no rule names", e.clientTLS(nobody), "NOT_AUTHORIZED"},
		{"a CN that looks like the writer's URI", e.clientTLS(cnLike), "NOT_AUTHORIZED"},
		{"a DNS SAN and such a CN", e.clientTLS(dnsLike), "NOT_AUTHORIZED"},
	} {
		gc := e.grpcClient(t, who.cfg)
		for _, md := range spoofMD {
			_, err := rtExec(t.Context(), gc, fence, tok, md...)
			if got := rtReason(err); got != who.want && (md[0] != ":authority" || err == nil) {
				t.Errorf("HOLE? gRPC, %s, metadata %s: got %q, want %s", who.name, md[0], got, who.want)
			}
		}
		hc := e.httpClient(t, who.cfg)
		u := "https://" + e.httpAddr + "/v1/fences/" + fence + "/sql"
		body := `{"statements":[{"sql":"SELECT 1"}]}`
		for _, h := range [][]string{
			{"X-Forwarded-Client-Cert", "URI=spiffe://rt/" + e.id + "/writer"},
			{"Grpc-Metadata-Authorization", "Bearer " + rtSecret("cron")},
			{"Grpc-Metadata-Principal", "spiffe://rt/" + e.id + "/writer"},
			{"Grpc-Metadata-X-Fencegate-Principal", "spiffe://rt/" + e.id + "/writer"},
			{"Grpcgateway-Authorization", "Bearer " + rtSecret("cron")},
			{"X-Remote-User", "token:cron"},
			{"X-Forwarded-User", "token:cron"},
			{"Proxy-Authorization", "Bearer " + rtSecret("cron")},
			{"Fencing-Token", tok + ";principal=token:cron"},
		} {
			hdr := []string{"Fencing-Token", tok, h[0], h[1]}
			if h[0] == "Fencing-Token" {
				hdr = h
			}
			code, reason := rtHTTP(t, hc, http.MethodPost, u, body, hdr...)
			if code == http.StatusOK {
				t.Errorf("HOLE: HTTP, %s, header %s: got 200, want %s", who.name, h[0], who.want)
			} else if h[0] != "Fencing-Token" && reason != who.want {
				t.Errorf("HTTP, %s, header %s: got %d %s, want %s", who.name, h[0], code, reason, who.want)
			}
		}
		// A bearer secret in a trailer is not a header.
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, u, io.NopCloser(strings.NewReader(body)))
		req.Header.Set("Fencing-Token", tok)
		req.Header.Set("Content-Type", "application/json")
		req.Trailer = http.Header{"Authorization": {"Bearer " + rtSecret("cron")}}
		if res, err := hc.Do(req); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				t.Errorf("HOLE: HTTP, %s, Authorization as a trailer: got 200", who.name)
			}
		}
	}
}

// TestRedTeamAuthBearerForms: the forms of a bearer secret, over gRPC and
// HTTP: what must not authenticate does not.
func TestRedTeamAuthBearerForms(t *testing.T) {
	e := startRT(t, `rules:
  - name: cron
    principals: ["token:cron"]
    fences: ["@-a"]
    actions: [sql.write]
    postgres_role: @_a_writer
`, "cron", "other")
	e.role(t, e.id+"_a_writer", false)
	fence := e.id + "-a"
	tok := e.lead(t, fence)
	sec := rtSecret("cron")
	gc := e.grpcClient(t, e.clientTLS(nil))
	hc := e.httpClient(t, e.clientTLS(nil))
	u := "https://" + e.httpAddr + "/v1/fences/" + fence + "/sql"
	body := `{"statements":[{"sql":"SELECT 1"}]}`
	if _, err := rtExec(t.Context(), gc, fence, tok, "authorization", "Bearer "+sec); err != nil {
		t.Fatalf("control: %v", err)
	}
	for _, tc := range []struct {
		name  string
		vals  []string
		wantG string // gRPC
	}{
		{"no scheme", []string{sec}, "UNAUTHENTICATED"},
		{"Basic", []string{"Basic " + sec}, "UNAUTHENTICATED"},
		{"Token scheme", []string{"Token " + sec}, "UNAUTHENTICATED"},
		{"Bearer without a space", []string{"Bearer" + sec}, "UNAUTHENTICATED"},
		{"Bearer, tab", []string{"Bearer\t" + sec}, "UNAUTHENTICATED"},
		{"scheme only", []string{"Bearer"}, "UNAUTHENTICATED"},
		{"scheme and a space", []string{"Bearer "}, "UNAUTHENTICATED"},
		{"scheme and spaces", []string{"Bearer    "}, "UNAUTHENTICATED"},
		{"the stored hash", []string{"Bearer " + sha256Hex(sec)}, "UNAUTHENTICATED"},
		{"a prefix of the secret", []string{"Bearer " + sec[:len(sec)-1]}, "UNAUTHENTICATED"},
		{"the secret and more", []string{"Bearer " + sec + "x"}, "UNAUTHENTICATED"},
		{"the secret, a comma and another", []string{"Bearer " + sec + ", Bearer " + rtSecret("other")}, "UNAUTHENTICATED"},
		{"two values, both the secret", []string{"Bearer " + sec, "Bearer " + sec}, "UNAUTHENTICATED"},
		{"two values, another's first", []string{"Bearer " + rtSecret("other"), "Bearer " + sec}, "UNAUTHENTICATED"},
		{"the other token's secret", []string{"Bearer " + rtSecret("other")}, "NOT_AUTHORIZED"},
		{"the secret upper-cased", []string{"Bearer " + strings.ToUpper(sec)}, "UNAUTHENTICATED"},
		{"a NUL inside", []string{"Bearer " + sec + "\x00"}, "UNAUTHENTICATED"},
	} {
		md := []string{}
		for _, v := range tc.vals {
			md = append(md, "authorization", v)
		}
		_, err := rtExec(t.Context(), gc, fence, tok, md...)
		switch got := rtReason(err); {
		case err == nil:
			t.Errorf("HOLE: gRPC %s: the write went through", tc.name)
		case strings.Contains(got, "non-printable"):
			// grpc-go's client refuses to send it: nothing reached the server.
		case got != tc.wantG:
			t.Errorf("gRPC %s: got %q, want %s", tc.name, got, tc.wantG)
		}
		hdr := []string{"Fencing-Token", tok}
		for _, v := range tc.vals {
			hdr = append(hdr, "Authorization", v)
		}
		if code, reason := rtHTTP(t, hc, http.MethodPost, u, body, hdr...); code == http.StatusOK {
			t.Errorf("HOLE: HTTP %s: got 200 (%s)", tc.name, reason)
		}
	}
}

// TestRedTeamAuthEmptySecret: a token file line holding the SHA-256 of the
// empty string (what `echo -n "$UNSET" | sha256sum` writes when the
// variable is unset) must not let in a caller that sends no secret: the
// file is refused, or a bearer that is empty after trimming is. Over
// HTTP, net/http trims spaces and tabs from the value but not U+00A0,
// which strings.TrimSpace then removes; over gRPC the spaces arrive.
func TestRedTeamAuthEmptySecret(t *testing.T) {
	e := startRT(t, `rules:
  - name: cron
    principals: ["token:cron"]
    fences: ["@-a"]
    actions: [sql.write]
    postgres_role: @_a_writer
`)
	e.role(t, e.id+"_a_writer", false)
	if err := os.WriteFile(e.tokenFile, []byte("cron "+sha256Hex("")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.authn.Reload(); err != nil {
		return // refused: the previous token set stays, and no secret is empty
	}
	t.Errorf("a token file with the hash of the empty secret: loaded, want refused")
	fence := e.id + "-a"
	tok := e.lead(t, fence)
	gc := e.grpcClient(t, e.clientTLS(nil))
	for _, v := range []string{"Bearer  ", "Bearer \u00a0", "bearer \u2003"} {
		if _, err := rtExec(t.Context(), gc, fence, tok, "authorization", v); err == nil {
			t.Errorf("HOLE: gRPC authorization %q (no secret) was let in as token:cron", v)
		}
	}
	hc := e.httpClient(t, e.clientTLS(nil))
	for _, v := range []string{"Bearer \u00a0", "Bearer \u0085", "Bearer \u00a0\u00a0"} {
		if code, _ := rtHTTP(t, hc, http.MethodPost, "https://"+e.httpAddr+"/v1/fences/"+fence+"/sql",
			`{"statements":[{"sql":"SELECT 1"}]}`, "Fencing-Token", tok, "Authorization", v); code == http.StatusOK {
			t.Errorf("HOLE: HTTP Authorization %q (no secret) was let in as token:cron", v)
		}
	}
}

// TestRedTeamAuthTokenFileInPlaceEdit: a token removed by editing the file
// in place, keeping its size, within the timestamp granularity of the
// previous load (emulated by restoring the mtime) is still accepted: the
// reloader compares mtime, size and inode, not content. The policy file is
// compared by content (Store.poll).
func TestRedTeamAuthTokenFileInPlaceEdit(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "tokens")
	if err := os.WriteFile(f, []byte("cron "+sha256Hex(rtSecret("cron"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var clk atomic.Int64
	clk.Store(time.Now().UnixNano())
	a, err := auth.NewAuthenticator(false, f, nil, auth.WithClock(func() time.Time { return time.Unix(0, clk.Load()) }))
	if err != nil {
		t.Fatal(err)
	}
	if c := a.Identify(nil, "Bearer "+rtSecret("cron"), nil); c.Principal != "token:cron" {
		t.Fatalf("control: got %+v", c)
	}
	fi, err := os.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	// Rotate cron's secret: same name, same length, new hash; in place.
	if err := os.WriteFile(f, []byte("cron "+sha256Hex(rtSecret("cron2"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(f, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	clk.Add(int64(5 * time.Second))
	a.Identify(nil, "Bearer x", nil) // the once-a-second look
	clk.Add(int64(5 * time.Second))
	if c := a.Identify(nil, "Bearer "+rtSecret("cron"), nil); c.Principal != "" {
		t.Logf("finding (not counted as a hole: needs two writes within one mtime tick): the revoked secret still names %q after an in-place, same-size edit", c.Principal)
	}
}

// TestRedTeamAuthCrossAction: a principal allowed only sql.write on fence
// a may do nothing else: no redis.write, no fence.admin (reset), no
// fence.read of a or of b, no sql.write on b, on every way in.
func TestRedTeamAuthCrossAction(t *testing.T) {
	e := startRT(t, `rules:
  - name: sql-only
    principals: ["spiffe://rt/@/sql"]
    fences: ["@-a"]
    actions: [sql.write]
    postgres_role: @_a_writer
  - name: read-b-others
    principals: ["spiffe://rt/@/reader"]
    fences: ["@-b"]
    actions: [fence.read]
`)
	e.role(t, e.id+"_a_writer", false)
	a, b := e.id+"-a", e.id+"-b"
	atok, btok := e.lead(t, a), e.lead(t, b)
	sqlOnly := e.cert(t, "sqlonly", rtLeaf{URIs: []string{"spiffe://rt/" + e.id + "/sql"}})
	gc := e.grpcClient(t, e.clientTLS(sqlOnly))
	ctx := t.Context()
	if _, err := rtExec(ctx, gc, a, atok); err != nil {
		t.Fatalf("control: sql.write on a: %v", err)
	}
	if _, err := rtExec(ctx, gc, b, btok); rtReason(err) != "NOT_AUTHORIZED" {
		t.Errorf("gRPC sql.write on b: got %q", rtReason(err))
	}
	mdctx := metadata.AppendToOutgoingContext(ctx, "fencing-token", atok)
	cmd, err := structpb.NewList([]any{"SET", "{" + a + "}:k", "1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gc.Redis(mdctx, &fencegatev1.RedisRequest{Fence: a, Commands: []*structpb.ListValue{cmd}}); rtReason(err) != "NOT_AUTHORIZED" {
		t.Errorf("gRPC redis.write on a: got %q", rtReason(err))
	}
	if _, err := gc.ResetFence(ctx, &fencegatev1.ResetFenceRequest{Fence: a, HighWater: proto.Uint64(0)}); rtReason(err) != "NOT_AUTHORIZED" {
		t.Errorf("gRPC fence.admin (reset) on a: got %q", rtReason(err))
	}
	for _, f := range []string{a, b} {
		if _, err := gc.GetFence(ctx, &fencegatev1.GetFenceRequest{Fence: f}); rtReason(err) != "NOT_AUTHORIZED" {
			t.Errorf("gRPC GetFence %s: got %q", f, rtReason(err))
		}
	}
	if l, err := gc.ListFences(ctx, &fencegatev1.ListFencesRequest{}); err != nil || len(l.GetFences()) != 0 {
		t.Errorf("gRPC ListFences: got %v, %v; want none", l.GetFences(), err)
	}
	hc := e.httpClient(t, e.clientTLS(sqlOnly))
	base := "https://" + e.httpAddr + "/v1/fences/"
	for _, r := range []struct{ method, path, body string }{
		{http.MethodPost, a + "/redis", `{"commands":[["SET","{` + a + `}:k","1"]]}`},
		{http.MethodPost, a + "/reset", `{"highWater":"0"}`},
		{http.MethodGet, a, ""},
		{http.MethodGet, b, ""},
		{http.MethodPost, b + "/sql", `{"statements":[{"sql":"SELECT 1"}]}`},
	} {
		if code, reason := rtHTTP(t, hc, r.method, base+r.path, r.body, "Fencing-Token", atok); reason != "NOT_AUTHORIZED" {
			t.Errorf("HTTP %s %s: got %d %q, want NOT_AUTHORIZED", r.method, r.path, code, reason)
		}
	}
	// RESP: the sql.write principal may not redis.write.
	rc := e.respDial(t, e.clientTLS(sqlOnly))
	if got := rc.do("AUTH", a, atok); got != "+OK" {
		t.Fatalf("RESP AUTH: %q", got)
	}
	if got := rc.do("SET", "{"+a+"}:k", "1"); !strings.HasPrefix(got, "-NOT_AUTHORIZED") {
		t.Errorf("RESP SET as a sql.write-only principal: got %q", got)
	}
	// pgwire with the certificate: sql.write on a allowed (control), b not.
	e.role(t, e.id+"_login", true)
	if _, err := e.pgConnect(t, e.id+"_login", a, atok, e.clientTLS(sqlOnly)); err != nil {
		t.Fatalf("control: pgwire on a: %v", err)
	}
	if c, err := e.pgConnect(t, e.id+"_login", b, btok, e.clientTLS(sqlOnly)); err == nil {
		if _, err := c.Exec(ctx, "SELECT 1"); !strings.HasPrefix(pgCode(err), "42501") {
			t.Errorf("pgwire on b with a's certificate: got %q, want 42501", pgCode(err))
		}
	}
}

// TestRedTeamAuthHTTPPathForms: the fence of an HTTP request is the path's,
// decoded once; encodings, case, dots, a different fence in the body and
// traversal never reach a fence the caller may not write.
func TestRedTeamAuthHTTPPathForms(t *testing.T) {
	e := startRT(t, `rules:
  - name: a-writer
    principals: ["spiffe://rt/@/a"]
    fences: ["@-a"]
    actions: [sql.write, fence.read]
    postgres_role: @_a_writer
  - name: freeze
    effect: deny
    principals: ["*"]
    fences: ["@-a.frozen"]
    actions: [sql.write]
`)
	e.role(t, e.id+"_a_writer", false)
	a, b := e.id+"-a", e.id+"-b"
	atok, btok := e.lead(t, a), e.lead(t, b)
	ftok := e.lead(t, a+".frozen")
	aw := e.cert(t, "a", rtLeaf{URIs: []string{"spiffe://rt/" + e.id + "/a"}})
	hc := e.httpClient(t, e.clientTLS(aw))
	base := "https://" + e.httpAddr
	body := func(f string) string { return `{"fence":"` + f + `","statements":[{"sql":"SELECT 1"}]}` }
	pct := func(s string) string {
		var sb strings.Builder
		for i := 0; i < len(s); i++ {
			fmt.Fprintf(&sb, "%%%02x", s[i])
		}
		return sb.String()
	}
	if code, reason := rtHTTP(t, hc, http.MethodPost, base+"/v1/fences/"+a+"/sql", body(a), "Fencing-Token", atok); code != 200 {
		t.Fatalf("control: %d %s", code, reason)
	}
	if code, _ := rtHTTP(t, hc, http.MethodPost, base+"/v1/fences/"+pct(a)+"/sql", body(a), "Fencing-Token", atok); code != 200 {
		t.Logf("note: a fully percent-encoded path to a got %d", code)
	}
	for _, tc := range []struct{ path, body, tok string }{
		{"/v1/fences/" + b + "/sql", body(a), btok},
		{"/v1/fences/" + b + "/sql", body(b), btok},
		{"/v1/fences/" + pct(b) + "/sql", body(a), btok},
		{"/v1/fences/" + strings.ReplaceAll(pct(b), "%", "%25") + "/sql", body(a), btok},
		{"/v1/fences/" + a + "%2F..%2F" + b + "/sql", body(a), btok},
		{"/v1/fences/" + a + "/../" + b + "/sql", body(a), btok},
		{"/v1/fences/" + a + "%2f..%2f" + b + "/sql", body(a), btok},
		{"/v1/fences/" + a + "/..%2F" + b + "/sql", body(a), btok},
		{"/v1/fences/" + strings.ToUpper(a) + "/sql", body(a), atok},
		{"/v1/fences/" + a + "./sql", body(a), atok},
		{"/v1/fences/" + a + "%2E/sql", body(a), atok},
		{"/v1/fences/" + a + "%00/sql", body(a), atok},
		{"/v1/fences/" + a + "%20/sql", body(a), atok},
		{"/v1/fences/" + a + ".frozen/sql", body(a), ftok},
		{"/v1/fences/" + a + "%2Efrozen/sql", body(a), ftok},
		{"/v1/fences//sql", body(a), atok},
		{"/v1/fences/%2F/sql", body(a), atok},
		{"/v1/fences/" + a + "/sql/../../" + b + "/sql", body(a), btok},
		{"/v1/fences/" + b + "/sql?fence=" + a, body(a), btok},
		{"/v1/fences/" + b + ";" + a + "/sql", body(a), btok},
		{"/v1/fences/" + b + ":sql", body(a), btok},
		{"/v1/fences/" + b + "/sql#" + a, body(a), btok},
	} {
		code, reason := rtHTTP(t, hc, http.MethodPost, base+tc.path, tc.body, "Fencing-Token", tc.tok)
		if code == http.StatusOK {
			t.Errorf("HOLE: POST %s (body fence %s): got 200", tc.path, tc.body)
		} else {
			t.Logf("POST %s: %d %s", tc.path, code, reason)
		}
	}
	// Reads: only a.
	for _, p := range []string{b, pct(b), strings.ToUpper(a), a + ".frozen"} {
		if code, _ := rtHTTP(t, hc, http.MethodGet, base+"/v1/fences/"+p, ""); code == http.StatusOK {
			t.Errorf("HOLE: GET /v1/fences/%s: got 200", p)
		}
	}
}

// TestRedTeamAuthPolicyReload: a broken policy keeps the previous one
// (deny rules included), and a reload that removes a rule takes effect at
// the next write of connections opened before it: gRPC, HTTP keep-alive,
// the PostgreSQL listener and the RESP listener.
func TestRedTeamAuthPolicyReload(t *testing.T) {
	const full = `rules:
  - name: writer
    principals: ["spiffe://rt/@/w"]
    fences: ["@-a", "@-frozen"]
    actions: [sql.write, redis.write]
    postgres_role: @_a_writer
  - name: freeze
    effect: deny
    principals: ["*"]
    fences: ["@-frozen"]
    actions: [sql.write, redis.write]
`
	e := startRT(t, full)
	e.role(t, e.id+"_a_writer", false)
	e.role(t, e.id+"_login", true)
	a, fz := e.id+"-a", e.id+"-frozen"
	atok, ftok := e.lead(t, a), e.lead(t, fz)
	w := e.cert(t, "w", rtLeaf{URIs: []string{"spiffe://rt/" + e.id + "/w"}})
	gc := e.grpcClient(t, e.clientTLS(w))
	hc := e.httpClient(t, e.clientTLS(w))
	hu := "https://" + e.httpAddr + "/v1/fences/" + a + "/sql"
	body := `{"statements":[{"sql":"SELECT 1"}]}`
	pc, err := e.pgConnect(t, e.id+"_login", a, atok, e.clientTLS(w))
	if err != nil {
		t.Fatal(err)
	}
	rc := e.respDial(t, e.clientTLS(w))
	if got := rc.do("AUTH", a, atok); got != "+OK" {
		t.Fatal(got)
	}
	ctx := t.Context()
	allowed := func(stage string, want bool) {
		t.Helper()
		_, err := rtExec(ctx, gc, a, atok)
		if (err == nil) != want {
			t.Errorf("%s: gRPC: got %q, want allowed=%v", stage, rtReason(err), want)
		}
		code, reason := rtHTTP(t, hc, http.MethodPost, hu, body, "Fencing-Token", atok)
		if (code == 200) != want {
			t.Errorf("%s: HTTP: got %d %s, want allowed=%v", stage, code, reason, want)
		}
		_, err = pc.Exec(ctx, "SELECT 1")
		if (err == nil) != want {
			t.Errorf("%s: pgwire: got %q, want allowed=%v", stage, pgCode(err), want)
		}
		got := rc.do("SET", "{"+a+"}:k", "1")
		if (got == "+OK") != want {
			t.Errorf("%s: RESP: got %q, want allowed=%v", stage, got, want)
		}
	}
	frozen := func(stage string) {
		t.Helper()
		if _, err := rtExec(ctx, gc, fz, ftok); rtReason(err) != "NOT_AUTHORIZED" {
			t.Errorf("%s: frozen fence over gRPC: got %q", stage, rtReason(err))
		}
	}
	allowed("before", true)
	frozen("before")
	for _, broken := range []string{
		"", "rules:\n", "rules: [\n", "{}\n",
		"rules:\n  - name: writer\n    principals: [\"*\"]\n    fences: [\"*\"]\n    actions: [sql.write, redis.write]\n    postgres_role: pg_read_all_data\n",
		full + "  - name: extra\n    principals: [\"*\"]\n    fences: [\"*\"]\n    actions: [sql.write]\n",
		full + "  - {name: writer, principals: [x], fences: [y], actions: [fence.read]}\n",
		strings.Replace(full, "effect: deny", "effect: Deny", 1),
		strings.Replace(full, "effect: deny", "Effect: deny", 1),
		strings.Replace(full, "    effect: deny\n", "    effect: deny\n    effect: allow\n", 1),
	} {
		if err := e.writePolicy(t, broken); err == nil {
			t.Errorf("HOLE? a broken policy was put in force:\n%s", e.expand(broken))
			_ = e.writePolicy(t, full)
			continue
		}
		frozen(fmt.Sprintf("after broken policy %.30q", broken))
	}
	if err := os.Remove(e.policyFile); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Reload(); err == nil {
		t.Error("a missing policy file was accepted")
	}
	frozen("after the file was removed")
	allowed("after broken files", true)
	// The writer's rule removed; the connections stay open.
	if err := e.writePolicy(t, `rules:
  - name: freeze
    effect: deny
    principals: ["*"]
    fences: ["@-frozen"]
    actions: [sql.write, redis.write]
`); err != nil {
		t.Fatal(err)
	}
	allowed("after the rule was removed", false)
	// And a deny added later cuts them off too.
	if err := e.writePolicy(t, full+`  - name: cut
    effect: deny
    principals: ["spiffe://rt/@/w"]
    fences: ["*"]
    actions: [sql.write, redis.write]
`); err != nil {
		t.Fatal(err)
	}
	allowed("after a deny was added", false)
}

// TestRedTeamAuthSessionFenceSwitch: the drop-in listeners cannot move a
// connection to a fence its principal may not write: pgwire settings
// (SET, set_config, options) and RESP AUTH/HELLO to another fence.
func TestRedTeamAuthSessionFenceSwitch(t *testing.T) {
	e := startRT(t, `rules:
  - name: a
    principals: ["spiffe://rt/@/a"]
    fences: ["@-a"]
    actions: [sql.write, redis.write]
`)
	e.role(t, e.id+"_login", true)
	a, b := e.id+"-a", e.id+"-b"
	atok, btok := e.lead(t, a), e.lead(t, b)
	aw := e.cert(t, "a", rtLeaf{URIs: []string{"spiffe://rt/" + e.id + "/a"}})
	ctx := t.Context()
	pc, err := e.pgConnect(t, e.id+"_login", a, atok, e.clientTLS(aw))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"SET fencegate.fence = '" + b + "'",
		"SET fencegate.fence TO " + pgx.Identifier{b}.Sanitize(),
		"SET SESSION fencegate.fence = '" + b + "'",
		"SET LOCAL fencegate.fence = '" + b + "'",
		"SELECT set_config('fencegate.fence', '" + b + "', false)",
		"SELECT pg_catalog.set_config('FENCEGATE.FENCE', '" + b + "', false)",
		"RESET fencegate.fence",
		"SET \"fencegate.fence\" = '" + b + "'",
		"SET fencegate.token = " + btok,
	} {
		_, _ = pc.Exec(ctx, s)
		var f string
		if err := pc.QueryRow(ctx, "SHOW fencegate.fence").Scan(&f); err != nil {
			t.Fatalf("SHOW fencegate.fence after %q: %v", s, err)
		}
		if f != a {
			t.Errorf("HOLE: after %q the session's fence is %q", s, f)
		}
	}
	// A connection asking for b with two spellings of the setting.
	for _, opts := range []string{
		"-c fencegate.fence=" + a + " -c FENCEGATE.FENCE=" + b,
		"-c fencegate.fence=" + b,
		"--fencegate.fence=" + b,
	} {
		cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://%s@%s/postgres?sslmode=require", e.id+"_login", e.pgAddr))
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["options"] = opts + " -c fencegate.token=" + btok
		cfg.TLSConfig = e.clientTLS(aw)
		cfg.Fallbacks = nil
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			continue
		}
		_, err = c.Exec(ctx, "SELECT 1")
		var f string
		_ = c.QueryRow(ctx, "SHOW fencegate.fence").Scan(&f)
		c.Close(ctx)
		if err == nil && f != a {
			t.Errorf("HOLE: options %q: a transaction ran in fence %q", opts, f)
		}
	}
	rc := e.respDial(t, e.clientTLS(aw))
	for _, step := range []struct {
		args     []string
		mustFail bool
	}{
		{[]string{"AUTH", a, atok}, false},
		{[]string{"AUTH", b, btok}, false},
		{[]string{"SET", "{" + b + "}:k", "1"}, true},
		{[]string{"HELLO", "2", "AUTH", b, btok}, false},
		{[]string{"SET", "{" + b + "}:k", "1"}, true},
		{[]string{"AUTH", a, atok}, false},
		{[]string{"MULTI"}, false},
		{[]string{"AUTH", b, btok}, false},
		{[]string{"SET", "{" + b + "}:k", "1"}, false},
		{[]string{"EXEC"}, true},
		{[]string{"AUTH", b, btok}, false},
		{[]string{"MULTI"}, false},
		{[]string{"SET", "{" + b + "}:k", "1"}, false},
		{[]string{"EXEC"}, true},
		{[]string{"AUTH", a, atok}, false},
		{[]string{"SET", "{" + b + "}:k", "1"}, true},
		{[]string{"RESET"}, false},
		{[]string{"SET", "{" + b + "}:k", "1"}, true},
	} {
		got := rc.do(step.args...)
		if step.mustFail && !strings.HasPrefix(got, "-") {
			t.Errorf("HOLE: RESP %v: got %q", step.args, got)
		}
	}
	if v := e.redisGet(t, "{"+b+"}:k"); v != "" {
		t.Errorf("HOLE: fence b's key holds %q", v)
	}
}

func (e *rtEnv) redisGet(t *testing.T, key string) string {
	t.Helper()
	c, err := net.Dial("tcp", redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := &respConn{t: t, c: c, br: bufio.NewReader(c)}
	got := r.do("GET", key)
	if got == "$-1" {
		return ""
	}
	return got
}

// TestRedTeamAuthCertificates: certificates that must name nobody: signed
// by a leaf the CA issued (not a CA), expired, not yet valid, server-only,
// from another CA, self-signed, signed by a look-alike of the CA (same
// subject, another key); on every listener.
func TestRedTeamAuthCertificates(t *testing.T) {
	e := startRT(t, `rules:
  - name: w
    principals: ["spiffe://rt/@/w"]
    fences: ["@-a"]
    actions: [sql.write, redis.write, fence.read]
    postgres_role: @_a_writer
`)
	e.role(t, e.id+"_a_writer", false)
	e.role(t, e.id+"_login", true)
	a := e.id + "-a"
	atok := e.lead(t, a)
	uri := "spiffe://rt/" + e.id + "/w"
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	w := e.cert(t, "w", rtLeaf{URIs: []string{uri}})
	if _, err := rtExec(t.Context(), e.grpcClient(t, e.clientTLS(w)), a, atok); err != nil {
		t.Fatalf("control: %v", err)
	}
	leaf := e.cert(t, "leaf", rtLeaf{URIs: []string{"spiffe://rt/" + e.id + "/leaf"}})
	leafKey := leaf.PrivateKey.(*ecdsa.PrivateKey)
	other := newRTCA(t, t.TempDir())
	look := newRTCA(t, t.TempDir()) // its key signs a look-alike of the CA: same subject and key id
	lookDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(rtSerial.Add(1)), Subject: e.ca.cert.Subject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		SubjectKeyId: e.ca.cert.SubjectKeyId,
	}, &x509.Certificate{Subject: e.ca.cert.Subject, SubjectKeyId: e.ca.cert.SubjectKeyId}, &look.key.PublicKey, look.key)
	if err != nil {
		t.Fatal(err)
	}
	lookCert, err := x509.ParseCertificate(lookDER)
	if err != nil {
		t.Fatal(err)
	}
	selfKey := mustKey(t)
	now := time.Now()
	certs := []struct {
		name string
		c    tls.Certificate
	}{
		{"signed by a leaf of the CA", e.ca.issue(t, rtLeaf{URIs: []string{uri}, EKU: client, Parent: leaf.Leaf, ParentKey: leafKey, Chain: [][]byte{leaf.Certificate[0]}})},
		{"expired", e.ca.issue(t, rtLeaf{URIs: []string{uri}, EKU: client, NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Minute)})},
		{"not yet valid", e.ca.issue(t, rtLeaf{URIs: []string{uri}, EKU: client, NotBefore: now.Add(time.Hour), NotAfter: now.Add(2 * time.Hour)})},
		{"server only", e.ca.issue(t, rtLeaf{URIs: []string{uri}, EKU: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})},
		{"code signing only", e.ca.issue(t, rtLeaf{URIs: []string{uri}, EKU: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}})},
		{"another CA's", other.issue(t, rtLeaf{URIs: []string{uri}, EKU: client})},
		{"self-signed", e.ca.issue(t, rtLeaf{URIs: []string{uri}, EKU: client, Parent: &x509.Certificate{Subject: pkix.Name{CommonName: "w"}}, ParentKey: selfKey})},
		{"signed by a look-alike of the CA", e.ca.issue(t, rtLeaf{URIs: []string{uri}, EKU: client, Parent: lookCert, ParentKey: look.key, Chain: [][]byte{lookDER}})},
	}
	for _, c := range certs {
		cfg := e.clientTLS(nil)
		cfg.Certificates = []tls.Certificate{c.c}
		if _, err := rtExec(t.Context(), e.grpcClient(t, cfg), a, atok); err == nil {
			t.Errorf("HOLE: gRPC with a certificate %s: the write went through", c.name)
		}
		if code, _ := rtHTTP(t, e.httpClient(t, cfg), http.MethodPost, "https://"+e.httpAddr+"/v1/fences/"+a+"/sql",
			`{"statements":[{"sql":"SELECT 1"}]}`, "Fencing-Token", atok); code == 200 {
			t.Errorf("HOLE: HTTP with a certificate %s: 200", c.name)
		}
		if pc, err := e.pgConnect(t, e.id+"_login", a, atok, cfg); err == nil {
			// postgres:<login> is in no rule: only the certificate could allow it.
			if _, err := pc.Exec(t.Context(), "SELECT 1"); err == nil {
				t.Errorf("HOLE: pgwire with a certificate %s: the transaction ran", c.name)
			}
		}
		if conn, err := tls.Dial("tcp", e.respAddr, cfg); err == nil {
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			_, werr := fmt.Fprintf(conn, "*3\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n*3\r\n$3\r\nSET\r\n$%d\r\n{%s}:c\r\n$1\r\n1\r\n",
				len(a), a, len(atok), atok, len(a)+4, a)
			if werr == nil {
				line1, err1 := br.ReadString('\n')
				line2, err2 := br.ReadString('\n')
				if err1 == nil && err2 == nil && strings.HasPrefix(line2, "+OK") {
					t.Errorf("HOLE: RESP with a certificate %s: SET went through (%q %q)", c.name, line1, line2)
				}
			}
			conn.Close()
		}
	}
}

func mustKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestRedTeamAuthRole: a write runs as its rule's postgres_role and no
// other, whichever rule would match a different fence of the same
// principal.
func TestRedTeamAuthRole(t *testing.T) {
	e := startRT(t, `rules:
  - name: a
    principals: ["spiffe://rt/@/w"]
    fences: ["@-a"]
    actions: [sql.write]
    postgres_role: @_ra
  - name: wide
    principals: ["spiffe://rt/@/*"]
    fences: ["@-*"]
    actions: [sql.write]
    postgres_role: @_rw
`)
	e.role(t, e.id+"_ra", false)
	e.role(t, e.id+"_rw", false)
	e.sql(t, "CREATE TABLE @_who (fence text, who text DEFAULT current_user)",
		"GRANT INSERT ON @_who TO @_ra, @_rw")
	a, b := e.id+"-a", e.id+"-b"
	atok, btok := e.lead(t, a), e.lead(t, b)
	w := e.cert(t, "w", rtLeaf{URIs: []string{"spiffe://rt/" + e.id + "/w"}})
	gc := e.grpcClient(t, e.clientTLS(w))
	for _, f := range []struct{ fence, tok string }{{a, atok}, {b, btok}} {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "fencing-token", f.tok), 10*time.Second)
		_, err := gc.Exec(ctx, &fencegatev1.ExecRequest{Fence: f.fence, Statements: []*fencegatev1.Statement{{Sql: e.expand("INSERT INTO @_who (fence) VALUES ('" + f.fence + "')")}}})
		cancel()
		if err != nil {
			t.Fatalf("write %s: %v", f.fence, err)
		}
	}
	rows, err := e.admin.Query(t.Context(), e.expand("SELECT fence, who FROM @_who ORDER BY fence"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var f, who string
		if err := rows.Scan(&f, &who); err != nil {
			t.Fatal(err)
		}
		got[f] = who
	}
	if got[a] != e.id+"_ra" || got[b] != e.id+"_rw" {
		t.Errorf("HOLE: writes ran as %v, want %s as %s_ra and %s as %s_rw", got, a, e.id, b, e.id)
	}
}

// TestRedTeamAuthURISANNamespace records (it does not fail: API.md names
// a certificate by "its first URI SAN as is") that a URI SAN is not put in
// a namespace of its own as DNS SANs ("dns:") and common names ("cn:")
// are: a certificate whose URI SAN is "token:cron", "cn:ops-admin" or
// "postgres:app" carries the principal of a bearer token, of another
// certificate's common name, or of a PostgreSQL login. Whether that
// matters is up to what the CA lets a requester put in a URI SAN.
func TestRedTeamAuthURISANNamespace(t *testing.T) {
	e := startRT(t, `rules:
  - name: cron
    principals: ["token:cron", "cn:ops-admin", "postgres:app"]
    fences: ["@-a"]
    actions: [sql.write, fence.admin]
    postgres_role: @_a_writer
`, "cron")
	e.role(t, e.id+"_a_writer", false)
	fence := e.id + "-a"
	tok := e.lead(t, fence)
	for _, uri := range []string{"token:cron", "cn:ops-admin", "postgres:app"} {
		c := e.cert(t, "u", rtLeaf{URIs: []string{uri}})
		if _, err := rtExec(t.Context(), e.grpcClient(t, e.clientTLS(c)), fence, tok); err == nil {
			t.Logf("finding: a certificate whose URI SAN is %q writes as principal %q (no bearer secret, no such CN, no database login)", uri, uri)
		}
	}
}
