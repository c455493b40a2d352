package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/api/internal/jsonbody"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/tokens"
)

// HTTPConfig configures the HTTP side: the JSON gateway and the operations
// endpoints.
type HTTPConfig struct {
	// Ready answers /readyz: nil when ready, else the reason.
	Ready func(ctx context.Context) error
	// Metrics serves /metrics; nil serves 404.
	Metrics http.Handler
}

// jsonMarshaler writes every field, zero or not, so clients always find
// rowsAffected, hasLeader and the like; unknown request fields are refused,
// and so are integers a JSON number does not carry exactly (jsonbody).
var jsonMarshaler = jsonbody.Codec{JSONPb: &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{EmitUnpopulated: true}}}

// HTTPHandler serves the Gateway as HTTP/JSON under /v1/ (grpc-gateway,
// registered in-process: no loopback gRPC hop), its OpenAPI document at
// /v1/openapi.json, plus /healthz, /readyz and /metrics.
func (s *Server) HTTPHandler(ctx context.Context, cfg HTTPConfig) (http.Handler, error) {
	gw := runtime.NewServeMux(
		runtime.WithIncomingHeaderMatcher(headerMatcher),
		runtime.WithErrorHandler(s.errorHandler),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, jsonMarshaler),
	)
	if err := fencegatev1.RegisterGatewayHandlerServer(ctx, gw, s); err != nil {
		return nil, fmt.Errorf("api: register gateway: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", s.limitBody(gw))
	mux.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	registerOps(mux, cfg)
	var h http.Handler = mux
	if s.gw != nil && s.gw.Anonymous() {
		h = loopbackHosts(h)
	}
	return crossOrigin(h), nil
}

// crossOrigin refuses (403) a request that changes state and that a
// browser sent for a page of another site (Sec-Fetch-Site, else Origin
// against Host: net/http's CrossOriginProtection). A page's fetch() may
// POST cross-site with no preflight (a "simple request": text/plain,
// which the gateway reads as JSON), and the browser adds the client
// certificate it holds: a reset with an operator's, or anything on a
// gateway with no policy. Clients that are no browser send neither header
// and pass.
func crossOrigin(next http.Handler) http.Handler {
	p := http.NewCrossOriginProtection()
	p.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, fmt.Sprintf("fencegate: refused a cross-origin %s from a web page (Origin %.100q, Sec-Fetch-Site %.20q): a page of another site may not change fencegate's state",
			r.Method, r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site")), http.StatusForbidden)
	}))
	return p.Handler(next)
}

// loopbackHosts refuses (421), on a loopback connection, a request whose
// Host is neither an IP address nor localhost: a browser sends the name of
// the page's own site, which its owner may have pointed at 127.0.0.1 (DNS
// rebinding), and is then same-origin with the gateway. For a gateway
// that serves Anonymous callers, whose listener on loopback is then its
// boundary (a policy may grant anonymous callers, "*").
func loopbackHosts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// No Host at all (HTTP/1.0: HAProxy's httpchk, a shell probe) is
		// no browser's: browsers always send one.
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && loopback(local) && r.Host != "" && !LocalHost(r.Host) {
			http.Error(w, fmt.Sprintf("fencegate: refused Host %.100q on a loopback listener that takes callers with no identity: only an IP address or localhost names this machine "+
				"(a web page reaches 127.0.0.1 under a name of its own: DNS rebinding); connect to 127.0.0.1 or localhost, or require client certificates or bearer tokens", r.Host),
				http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopback says whether a is a loopback TCP address.
func loopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// LocalHost says whether a Host header names this machine without DNS:
// an IP address, or localhost (RFC 6761: never sent to DNS).
func LocalHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	_, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil
}

// OpsHandler serves only /healthz, /readyz and /metrics, answering as
// HTTPHandler does: for a plain-HTTP listener of their own that probes and
// Prometheus reach without the client certificate the main port may want.
// Its callers have no identity, so on a loopback connection it answers
// only a Host that names this machine without DNS (loopbackHosts): a web
// page under a rebound name would read the terms /metrics shows.
func OpsHandler(cfg HTTPConfig) http.Handler {
	mux := http.NewServeMux()
	registerOps(mux, cfg)
	return loopbackHosts(mux)
}

func registerOps(mux *http.ServeMux, cfg HTTPConfig) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Ready != nil {
			if err := cfg.Ready(r.Context()); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}
}

// limitBody refuses bodies over the limit before grpc-gateway reads them.
func (s *Server) limitBody(gw *runtime.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > int64(s.maxBody) {
			s.refuseHTTP(gw, w, r, tokens.Refuse(tokens.ReasonInvalidRequest, "", 0,
				"request body is %d bytes, limit is %d", r.ContentLength, s.maxBody))
			return
		}
		if why := tokenHeaderProblem(r.Header); why != "" {
			s.refuseHTTP(gw, w, r, tokens.Refuse(tokens.ReasonInvalidToken, "", 0, "%s", why))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, int64(s.maxBody))
		if fence, _, ok := pathFence(r); ok {
			r.Body = jsonbody.PathFenced(r.Body, fence)
		}
		gw.ServeHTTP(w, r)
	})
}

// refuseHTTP answers r with the refusal problem, found before
// grpc-gateway reached the Server (refuseWrite).
func (s *Server) refuseHTTP(mux *runtime.ServeMux, w http.ResponseWriter, r *http.Request, problem *tokens.RefusalError) {
	runtime.DefaultHTTPErrorHandler(r.Context(), mux, jsonMarshaler, w, r, statusError(s.refuseWrite(r.Context(), r, problem)))
}

// refuseWrite returns the refusal of r for problem, found before
// grpc-gateway reached the Server. A write's goes through the gateway
// (proxy.Gateway.RefuseRequest), as the Server's own do: the caller is
// authorized first, and the refusal is counted and audited.
func (s *Server) refuseWrite(ctx context.Context, r *http.Request, problem *tokens.RefusalError) error {
	a, fence, ok := writeOf(r)
	if !ok {
		return problem
	}
	problem.Fence = fence
	raw := r.Header.Get(tokens.Header)
	if problem.Reason == tokens.ReasonInvalidToken {
		raw = "" // which of the headers would it be?
	}
	return s.gw.RefuseRequest(proxy.WithProtocol(ctx, proxy.ProtocolHTTP), a, fence, raw, problem)
}

// pathFence is the fence a POST to /v1/fences/{fence}/{op} names, and op.
func pathFence(r *http.Request) (fence, op string, ok bool) {
	if r.Method != http.MethodPost {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/fences/")
	if !ok {
		return "", "", false
	}
	fence, op, ok = strings.Cut(rest, "/")
	return fence, op, ok && fence != ""
}

// writeOf says whether r asks for a write, POST /v1/fences/{fence}/sql or
// /redis, and of which fence.
func writeOf(r *http.Request) (policy.Action, string, bool) {
	fence, op, ok := pathFence(r)
	if !ok {
		return "", "", false
	}
	switch op {
	case "sql":
		return policy.ActionSQLWrite, fence, true
	case "redis":
		return policy.ActionRedisWrite, fence, true
	}
	return "", "", false
}

// tokenHeaderProblem says why the request's token headers cannot be read
// as one token, or "". grpc-gateway drops a header value that is not
// ASCII (logging it) and forwards the others, so a second Fencing-Token
// of that kind would go unseen by the rule that refuses two: it is
// refused here, as is any value not in ASCII.
func tokenHeaderProblem(h http.Header) string {
	n := 0
	for _, name := range [...]string{tokens.Header, "Grpc-Metadata-" + tokens.Header} {
		for _, v := range h.Values(name) {
			n++
			for i := 0; i < len(v); i++ {
				if v[i] >= utf8.RuneSelf {
					return fmt.Sprintf("a %s header that is not ASCII: the token is a decimal integer", tokens.Header)
				}
			}
		}
	}
	if n > 1 {
		return fmt.Sprintf("%d %s headers: send one", n, tokens.Header)
	}
	return ""
}

func headerMatcher(key string) (string, bool) {
	if strings.EqualFold(key, tokens.Header) {
		return tokens.MetadataKey, true
	}
	return runtime.DefaultHeaderMatcher(key)
}

// errorHandler answers errors of the JSON gateway. A status without a
// reason is one grpc-gateway made (malformed JSON, an unknown field, a
// body over the limit as it was read): the request never reached the
// Server, and is refused as INVALID_REQUEST, through the gateway for a
// write (refuseWrite).
func (s *Server) errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if st := status.Convert(err); st.Code() == codes.InvalidArgument && !hasErrorInfo(st) {
		err = statusError(s.refuseWrite(ctx, r, tokens.Refuse(tokens.ReasonInvalidRequest, "", 0, "%s", st.Message())))
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}
