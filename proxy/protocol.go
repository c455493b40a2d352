package proxy

import "context"

// The ways a write comes in, as logs and audit records name them.
const (
	ProtocolGRPC   = "grpc"
	ProtocolHTTP   = "http"
	ProtocolPgwire = "pgwire"
	ProtocolRESP   = "resp"
)

type protocolKey struct{}

// WithProtocol returns ctx naming the protocol its writes came in by. A
// front whose connections carry many writes (the PostgreSQL and RESP
// listeners) sets it once per connection.
func WithProtocol(ctx context.Context, protocol string) context.Context {
	return context.WithValue(ctx, protocolKey{}, protocol)
}

// protocolOf names the protocol of ctx's write: the one WithProtocol set,
// else what Options.Protocol tells from the request's context, else "".
// It is only asked when a refusal is logged or a record audited, so the
// fronts that tell it from their own context (gRPC and HTTP) pay nothing
// per request.
func (g *Gateway) protocolOf(ctx context.Context) string {
	if p, ok := ctx.Value(protocolKey{}).(string); ok {
		return p
	}
	if g.protocol != nil {
		return g.protocol(ctx)
	}
	return ""
}
