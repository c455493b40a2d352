package api

import (
	"context"
	"math"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/api/internal/jsonbody"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/tokens"
)

// Server implements fencegatev1.GatewayServer on top of a proxy.Gateway.
type Server struct {
	fencegatev1.UnimplementedGatewayServer

	gw      *proxy.Gateway
	maxBody int
}

// NewServer returns a server answering with gw; requests larger than
// maxBody bytes are refused with INVALID_REQUEST.
func NewServer(gw *proxy.Gateway, maxBody int) *Server {
	return &Server{gw: gw, maxBody: maxBody}
}

// Register registers the Gateway service on s.
func (s *Server) Register(gs *grpc.Server) {
	fencegatev1.RegisterGatewayServer(gs, s)
}

// tokenFrom returns the fencing token sent with the request: gRPC metadata,
// or the HTTP header as forwarded by grpc-gateway. More than one value is
// refused as an invalid token.
func tokenFrom(ctx context.Context) string {
	// Not FromIncomingContext, which copies the whole metadata map on
	// every request; this looks the key up the same way (exact, then case
	// insensitive) and copies only its values.
	vs := metadata.ValueFromIncomingContext(ctx, tokens.MetadataKey)
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	default:
		return strings.Join(vs, ",")
	}
}

// tooBig says why m is over the size limit, or nil.
func (s *Server) tooBig(m proto.Message, fence string) *tokens.RefusalError {
	if n := proto.Size(m); n > s.maxBody {
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, 0, "request is %d bytes, limit is %d", n, s.maxBody)
	}
	return nil
}

// refuse sends a request the server could not read through the
// gateway's refusal of such requests (proxy.Gateway.RefuseRequest), so
// that it is authorized first and counted and audited like any refusal.
func (s *Server) refuse(ctx context.Context, a policy.Action, fence string, problem *tokens.RefusalError) error {
	return statusError(s.gw.RefuseRequest(ctx, a, fence, tokenFrom(ctx), problem))
}

// Exec implements rpc Gateway.Exec.
func (s *Server) Exec(ctx context.Context, req *fencegatev1.ExecRequest) (*fencegatev1.ExecResponse, error) {
	if r := unreadable(req, req.GetFence()); r != nil {
		return nil, s.refuse(ctx, policy.ActionSQLWrite, req.GetFence(), r)
	}
	if r := s.tooBig(req, req.GetFence()); r != nil {
		return nil, s.refuse(ctx, policy.ActionSQLWrite, req.GetFence(), r)
	}
	stmts := make([]postgres.Statement, len(req.Statements))
	for i, st := range req.Statements {
		ps, j := params(st.GetParams())
		if j >= 0 {
			return nil, s.refuse(ctx, policy.ActionSQLWrite, req.GetFence(), tokens.Refuse(tokens.ReasonInvalidRequest, req.GetFence(), 0,
				"statement %d param %d: %s", i, j, inexactMsg))
		}
		stmts[i] = postgres.Statement{SQL: st.GetSql(), Params: ps}
	}
	t, res, err := s.gw.Exec(ctx, req.GetFence(), tokenFrom(ctx), stmts)
	if err != nil {
		return nil, statusError(err)
	}
	out := &fencegatev1.ExecResponse{Fence: req.GetFence(), Token: uint64(t), Results: make([]*fencegatev1.StatementResult, len(res))}
	for i := range res {
		r, err := statementResult(&res[i])
		if err != nil {
			return nil, appliedButUnencodable(t, i, err)
		}
		out.Results[i] = r
	}
	return out, nil
}

// Redis implements rpc Gateway.Redis.
func (s *Server) Redis(ctx context.Context, req *fencegatev1.RedisRequest) (*fencegatev1.RedisResponse, error) {
	if r := unreadable(req, req.GetFence()); r != nil {
		return nil, s.refuse(ctx, policy.ActionRedisWrite, req.GetFence(), r)
	}
	if r := s.tooBig(req, req.GetFence()); r != nil {
		return nil, s.refuse(ctx, policy.ActionRedisWrite, req.GetFence(), r)
	}
	cmds := make([][]string, len(req.Commands))
	for i, c := range req.Commands {
		args := make([]string, len(c.GetValues()))
		for j, v := range c.GetValues() {
			a, problem := redisArg(v)
			if problem != "" {
				return nil, s.refuse(ctx, policy.ActionRedisWrite, req.GetFence(), tokens.Refuse(tokens.ReasonInvalidRequest, req.GetFence(), 0,
					"command %d argument %d: %s", i, j, problem))
			}
			args[j] = a
		}
		cmds[i] = args
	}
	t, res, err := s.gw.Redis(ctx, req.GetFence(), tokenFrom(ctx), cmds)
	if err != nil {
		return nil, statusError(err)
	}
	out := &fencegatev1.RedisResponse{Fence: req.GetFence(), Token: uint64(t), Results: make([]*structpb.Value, len(res))}
	for i, r := range res {
		v, err := jsonValue(r)
		if err != nil {
			return nil, appliedButUnencodable(t, i, err)
		}
		out.Results[i] = v
	}
	return out, nil
}

// redisArg turns an argument into the string sent to Redis, or says what
// is wrong with it. Strings go as they are. Numbers are a convenience:
// integers in decimal ("7", never "7e+00"), other numbers in plain decimal
// notation, shortest that reads back the same (strconv 'f', -1: 0.5,
// 0.0000001); integers beyond ±(2^53-1) and non-finite numbers are refused.
func redisArg(v *structpb.Value) (string, string) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return k.StringValue, ""
	case *structpb.Value_NumberValue:
		f := k.NumberValue
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return "", "want a finite number"
		case inexactInt(f):
			return "", inexactMsg
		case f == math.Trunc(f):
			return strconv.FormatInt(int64(f), 10), ""
		}
		return strconv.FormatFloat(f, 'f', -1, 64), ""
	}
	return "", "want a string or a number"
}

// GetFence implements rpc Gateway.GetFence.
func (s *Server) GetFence(ctx context.Context, req *fencegatev1.GetFenceRequest) (*fencegatev1.Fence, error) {
	if r := unreadable(req, req.GetFence()); r != nil {
		return nil, statusError(r) // as HTTP refuses an unreadable read (refuseWrite)
	}
	f, err := s.gw.Fence(ctx, req.GetFence())
	if err != nil {
		return nil, statusError(err)
	}
	return fenceMessage(f), nil
}

// ListFences implements rpc Gateway.ListFences.
func (s *Server) ListFences(ctx context.Context, req *fencegatev1.ListFencesRequest) (*fencegatev1.ListFencesResponse, error) {
	if r := unreadable(req, ""); r != nil {
		return nil, statusError(r)
	}
	fs, err := s.gw.Fences(ctx)
	if err != nil {
		return nil, statusError(err)
	}
	out := &fencegatev1.ListFencesResponse{Fences: make([]*fencegatev1.Fence, len(fs))}
	for i, f := range fs {
		out.Fences[i] = fenceMessage(f)
	}
	return out, nil
}

// fenceMessage is f as the API sends it. A protobuf string must be UTF-8,
// and one that is not fails the whole answer (ListFences, for every
// fence), so each run of invalid bytes in the names and values fencegate
// takes from etcd as they are (an election's name, the value its leader
// campaigned with: etcd keys and values are bytes) is replaced by U+FFFD,
// as jsonValue does for Redis results.
func fenceMessage(f proxy.FenceState) *fencegatev1.Fence {
	return &fencegatev1.Fence{
		Name:      validUTF8(f.Name),
		HighWater: uint64(f.HighWater),
		Term:      uint64(f.Term.Rev),
		Leader:    validUTF8(f.Term.Leader),
		HasLeader: f.Term.HasLeader(),
	}
}

// validUTF8 is s with each run of invalid UTF-8 bytes replaced by U+FFFD.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// params turns JSON values into Go values for pgx: numbers that are whole
// become int64 so they fit integer columns. It returns the index of the
// first param that is or holds an integer beyond ±(2^53-1), else -1: a
// double that large may be a rounded integer (over HTTP the body decoder
// refuses those before they become doubles; this is the gRPC side).
func params(vs []*structpb.Value) ([]any, int) {
	if len(vs) == 0 {
		return nil, -1
	}
	out := make([]any, len(vs))
	for i, v := range vs {
		if holdsInexactInt(v) {
			return nil, i
		}
		out[i] = goValue(v)
	}
	return out, -1
}

// inexactMsg says why an integer beyond ±(2^53-1) is refused.
const inexactMsg = "an integer beyond ±(2^53-1) may have been rounded on its way in as a double; send it as a string"

// inexactInt reports whether f is a finite number beyond ±(2^53-1), where
// doubles cannot tell an integer from its rounded neighbours. (Every double
// that large is integral.) Infinities are not integers; a float8 param
// takes them.
func inexactInt(f float64) bool {
	return !math.IsInf(f, 0) && (f > jsonbody.MaxExactInt || f < -jsonbody.MaxExactInt)
}

// holdsInexactInt reports whether v is, or for a list or struct holds, a
// number beyond ±(2^53-1).
func holdsInexactInt(v *structpb.Value) bool {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		return inexactInt(k.NumberValue)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			if holdsInexactInt(e) {
				return true
			}
		}
	case *structpb.Value_StructValue:
		for _, e := range k.StructValue.GetFields() {
			if holdsInexactInt(e) {
				return true
			}
		}
	}
	return false
}

// wholeNumber reports whether a JSON number is an integer a float64 holds
// exactly, and returns it.
func wholeNumber(f float64) (int64, bool) {
	if f == math.Trunc(f) && !inexactInt(f) {
		return int64(f), true
	}
	return 0, false
}

func goValue(v *structpb.Value) any {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		if n, ok := wholeNumber(k.NumberValue); ok {
			return n
		}
		return k.NumberValue
	case *structpb.Value_StringValue:
		return k.StringValue
	case *structpb.Value_BoolValue:
		return k.BoolValue
	case *structpb.Value_NullValue, nil:
		return nil
	default:
		return v.AsInterface()
	}
}

func statementResult(r *postgres.Result) (*fencegatev1.StatementResult, error) {
	out := &fencegatev1.StatementResult{RowsAffected: r.RowsAffected, Columns: r.Columns}
	if len(r.Rows) > 0 {
		out.Rows = make([]*structpb.ListValue, len(r.Rows))
	}
	for i, row := range r.Rows {
		lv := &structpb.ListValue{Values: make([]*structpb.Value, len(row))}
		for j, v := range row {
			pv, err := jsonValue(v)
			if err != nil {
				return nil, err
			}
			lv.Values[j] = pv
		}
		out.Rows[i] = lv
	}
	return out, nil
}

// ServerOptions are the gRPC server options of fencegate serve, which
// bound what one client may make the server hold: a message of at most
// twice maxBody (a request's JSON form may be smaller than its protobuf
// one), metadata of at most 64 KiB (as the HTTP port bounds headers;
// grpc-go's own default is 16 MiB), and at most 1024 concurrent streams
// per connection. A fixed set of goroutines with grown stacks serves the
// streams, instead of a new goroutine (and stack growth) per request. A
// request message that does not parse is refused INVALID_REQUEST by the
// Server, a write through the pipeline, instead of grpc-go's INTERNAL
// (requestCodec); a server built without these options answers INTERNAL.
func ServerOptions(maxBody int) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(newRequestCodec()),
		grpc.MaxRecvMsgSize(2 * maxBody),
		grpc.MaxHeaderListSize(maxMetadataBytes),
		grpc.MaxConcurrentStreams(maxStreams),
		grpc.NumStreamWorkers(uint32(goruntime.GOMAXPROCS(0))),
		grpc.InTapHandle(firstMessageTap),
		grpc.ChainUnaryInterceptor(firstMessageUnary),
		grpc.ChainStreamInterceptor(firstMessageStream),
	}
}

const (
	maxMetadataBytes = 64 << 10
	maxStreams       = 1024
	// firstMessageTimeout bounds how long a call may wait for its request
	// message after its headers, as the HTTP port's ReadTimeout bounds a
	// request's body: a client that sends headers and never the message
	// would hold the call, and its goroutine, for as long as it liked,
	// before any interceptor could authenticate it.
	firstMessageTimeout = 30 * time.Second
)

type firstMessageKey struct{}

// firstMessageTap gives each call a context that firstMessageTimeout ends
// unless its first message comes first (firstMessageCame); grpc-go's read
// of the message waits on that context.
// The timer also stops when the call ends without an interceptor (an
// unknown method, a message grpc-go refuses): it would hold the call's
// context and metadata for the rest of firstMessageTimeout.
func firstMessageTap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	ctx, cancel := context.WithCancel(ctx)
	t := time.AfterFunc(firstMessageTimeout, cancel)
	context.AfterFunc(ctx, func() { t.Stop() })
	return context.WithValue(ctx, firstMessageKey{}, t), nil
}

// firstMessageCame lifts the call's first-message deadline.
func firstMessageCame(ctx context.Context) {
	if t, ok := ctx.Value(firstMessageKey{}).(*time.Timer); ok {
		t.Stop()
	}
}

// firstMessageUnary runs once a unary call's message has come.
func firstMessageUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	firstMessageCame(ctx)
	return handler(ctx, req)
}

// firstMessageStream lifts a stream's deadline at its first message (the
// health service's Watch, reflection), which then lives as long as it
// needs.
func firstMessageStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &firstMessageServerStream{ServerStream: ss})
}

type firstMessageServerStream struct {
	grpc.ServerStream
	came bool
}

func (s *firstMessageServerStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if !s.came {
		s.came = true
		firstMessageCame(s.Context())
	}
	return err
}

// appliedButUnencodable is the error of a write that was applied but whose
// result i has no JSON form: it must not read as a refusal, or a client
// would retry a write already done.
func appliedButUnencodable(t tokens.Token, i int, err error) error {
	return status.Errorf(codes.Internal, "fencegate: the write was applied (token %d), but its result %d cannot be sent: %v", t, i, err)
}

// jsonValue converts a result value to a protobuf Value; integers beyond
// 2^53, which a JSON number cannot carry exactly, become decimal strings.
// A string that is not valid UTF-8 (a Redis value holding binary data),
// which JSON and protobuf cannot carry, comes with each run of invalid bytes
// replaced by U+FFFD: the write it answers was applied.
func jsonValue(v any) (*structpb.Value, error) {
	switch x := v.(type) {
	case int64:
		if x > 1<<53 || x < -(1<<53) {
			return structpb.NewStringValue(strconv.FormatInt(x, 10)), nil
		}
		return structpb.NewNumberValue(float64(x)), nil
	case int32:
		return structpb.NewNumberValue(float64(x)), nil
	case int16:
		return structpb.NewNumberValue(float64(x)), nil
	case int:
		return jsonValue(int64(x))
	case string:
		return structpb.NewStringValue(validUTF8(x)), nil
	case []any:
		lv := &structpb.ListValue{Values: make([]*structpb.Value, len(x))}
		for i, e := range x {
			ev, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			lv.Values[i] = ev
		}
		return structpb.NewListValue(lv), nil
	}
	return structpb.NewValue(v)
}

// ProtocolOf names the protocol of a request this package served: "http"
// for grpc-gateway's JSON handlers (which call the gRPC methods in
// process), "grpc" for gRPC, "" for a context of neither. It is
// proxy.Options.Protocol for the gateway behind these servers.
func ProtocolOf(ctx context.Context) string {
	if _, ok := runtime.HTTPPathPattern(ctx); ok {
		return proxy.ProtocolHTTP
	}
	if grpc.ServerTransportStreamFromContext(ctx) != nil {
		return proxy.ProtocolGRPC
	}
	return ""
}

// ResetFence implements rpc Gateway.ResetFence.
func (s *Server) ResetFence(ctx context.Context, req *fencegatev1.ResetFenceRequest) (*fencegatev1.ResetFenceResponse, error) {
	if r := unreadable(req, req.GetFence()); r != nil {
		return nil, statusError(r) // never reset from a partial message
	}
	if req.HighWater == nil {
		// A zero mark forgets the fence: it must be asked for, not be
		// what a forgotten field or an empty body reads as.
		return nil, statusError(tokens.Refuse(tokens.ReasonInvalidRequest, req.GetFence(), 0,
			"highWater is required: the real leader's current token (0 forgets the fence)"))
	}
	res, err := s.gw.ResetFence(ctx, req.GetFence(), tokens.Token(req.GetHighWater()))
	if err != nil {
		return nil, statusError(err)
	}
	return &fencegatev1.ResetFenceResponse{
		Fence:           req.GetFence(),
		HighWaterBefore: uint64(res.Before),
		HighWater:       uint64(res.After),
		TermLowered:     res.TermLowered,
	}, nil
}
