package auth_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/proxy/policy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// clock is a settable time for crossing the once-a-second stat bound.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_700_000_000, 0)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// logBuf collects log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// errorLines returns the ERROR lines logged so far.
func (l *logBuf) errorLines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.Lines(l.b.String()) {
		if strings.Contains(line, "level=ERROR") {
			out = append(out, line)
		}
	}
	return out
}

func newLog() (*slog.Logger, *logBuf) {
	b := &logBuf{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}

// install replaces path with data the way operators and Kubernetes do: a
// new file renamed over the old one.
func install(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tlsFiles copies a server certificate and key, and optionally a CA bundle,
// to files of their own that the test can replace.
func tlsFiles(t *testing.T, certPEM, keyPEM, caPEM []byte) auth.TLSFiles {
	t.Helper()
	dir := t.TempDir()
	f := auth.TLSFiles{CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem")}
	install(t, f.CertFile, certPEM)
	install(t, f.KeyFile, keyPEM)
	if caPEM != nil {
		f.TrustedCAFile = filepath.Join(dir, "ca.pem")
		install(t, f.TrustedCAFile, caPEM)
	}
	return f
}

// Response headers the echo servers answer with.
const (
	hdrPrincipal = "x-test-principal"
	hdrAuthErr   = "x-test-auth-error"
	hdrSawAuth   = "x-test-saw-authorization"
)

// echoHealth is a gRPC health service that answers with the caller the
// interceptors attached, and with any authorization metadata it still sees.
type echoHealth struct {
	healthpb.UnimplementedHealthServer
}

func callerHeader(ctx context.Context) metadata.MD {
	md := metadata.Pairs(hdrPrincipal, "<none>", hdrAuthErr, "")
	if c := policy.CallerFrom(ctx); c != nil {
		md = metadata.Pairs(hdrPrincipal, c.Principal, hdrAuthErr, c.AuthError)
	}
	return md
}

func (echoHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := grpc.SetHeader(ctx, callerHeader(ctx)); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (echoHealth) Watch(_ *healthpb.HealthCheckRequest, s grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	if err := s.SetHeader(callerHeader(s.Context())); err != nil {
		return err
	}
	return s.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// spoofer runs before the authenticator's interceptor and attaches a
// caller of its own, as a careless earlier interceptor might.
func spoofer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(policy.NewContext(ctx, &policy.Caller{Principal: "spoofed-by-context"}), req)
}

// startGRPC serves echoHealth on 127.0.0.1 with st's TLS (plain TCP when
// st is nil) and a's interceptors.
func startGRPC(t *testing.T, st *auth.ServerTLS, a *auth.Authenticator) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(spoofer, a.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(a.StreamServerInterceptor()),
	}
	if cfg := st.Config(); cfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	gs := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(gs, echoHealth{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return lis.Addr().String()
}

// grpcClient is one client connection; its calls share one TCP connection.
type grpcClient struct {
	conn *grpc.ClientConn
	hc   healthpb.HealthClient
}

func dialGRPC(t *testing.T, addr string, cfg *tls.Config) *grpcClient {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &grpcClient{conn: c, hc: healthpb.NewHealthClient(c)}
}

// answer is what an echo server said about the caller.
type answer struct {
	principal, authErr string
	sawAuth            string            // authorization the handler still saw
	serverCert         *x509.Certificate // the certificate the server presented
}

// check calls Check with md as outgoing metadata.
func (c *grpcClient) check(t *testing.T, md metadata.MD) (answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ctx = metadata.NewOutgoingContext(ctx, md)
	var hdr metadata.MD
	var p peer.Peer
	_, err := c.hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Peer(&p), grpc.WaitForReady(false))
	if err != nil {
		return answer{}, err
	}
	a := answer{principal: first(hdr, hdrPrincipal), authErr: first(hdr, hdrAuthErr)}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		a.serverCert = ti.State.PeerCertificates[0]
	}
	return a, nil
}

// watch opens a Watch stream with md and reads its first answer.
func (c *grpcClient) watch(t *testing.T, md metadata.MD) (answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := c.hc.Watch(metadata.NewOutgoingContext(ctx, md), &healthpb.HealthCheckRequest{})
	if err != nil {
		return answer{}, err
	}
	if _, err := s.Recv(); err != nil {
		return answer{}, err
	}
	hdr, err := s.Header()
	if err != nil {
		return answer{}, err
	}
	return answer{principal: first(hdr, hdrPrincipal), authErr: first(hdr, hdrAuthErr)}, nil
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

// startHTTP serves, behind a's middleware, a grpc-gateway mux whose one
// route answers with the caller in the context and the authorization
// metadata grpc-gateway would hand the gRPC handler.
func startHTTP(t *testing.T, st *auth.ServerTLS, a *auth.Authenticator) string {
	t.Helper()
	mux := runtime.NewServeMux()
	err := mux.HandlePath(http.MethodGet, "/echo", func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		ctx, err := runtime.AnnotateIncomingContext(r.Context(), mux, r, "/grpc.health.v1.Health/Check")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		md, _ := metadata.FromIncomingContext(ctx)
		w.Header().Set(hdrSawAuth, strings.Join(append(md.Get("authorization"), r.Header.Values("Authorization")...), ","))
		if c := policy.CallerFrom(ctx); c != nil {
			w.Header().Set(hdrPrincipal, c.Principal)
			w.Header().Set(hdrAuthErr, c.AuthError)
		} else {
			w.Header().Set(hdrPrincipal, "<none>")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: a.HTTPMiddleware(mux), ReadHeaderTimeout: 10 * time.Second}
	if cfg := st.Config(); cfg != nil {
		lis = tls.NewListener(lis, cfg)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return lis.Addr().String()
}

// httpGet sends GET /echo with the headers hdr (pairs) over a fresh
// connection, or over client's when not nil.
func httpGet(t *testing.T, client *http.Client, addr string, hdr ...string) (answer, *http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+addr+"/echo", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, nil, err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return answer{}, resp, errors.New(resp.Status)
	}
	return answer{
		principal: resp.Header.Get(hdrPrincipal),
		authErr:   resp.Header.Get(hdrAuthErr),
		sawAuth:   resp.Header.Get(hdrSawAuth),
	}, resp, nil
}

func httpClient(t *testing.T, cfg *tls.Config) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// counter returns the value of the counter name gathered from reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
