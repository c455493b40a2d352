package policy

import (
	"context"
	"net"
)

// Action is what a caller asks to do to a fence (API.md, "Authentication and
// authorization").
type Action string

// The actions of API.md.
const (
	ActionSQLWrite   Action = "sql.write"
	ActionRedisWrite Action = "redis.write"
	ActionFenceRead  Action = "fence.read"
	ActionFenceAdmin Action = "fence.admin"
)

// Caller is who sent a request, as the transport verified it: a principal
// from a verified client certificate or a bearer token listed in the token
// file, never from anything else the client sent.
type Caller struct {
	// Principal is empty for an anonymous caller.
	Principal string
	// Peer is the remote address of the connection.
	Peer net.Addr
	// AuthError, when not empty, says why credentials the caller presented
	// were not accepted (an unknown bearer token). The caller is then
	// anonymous.
	AuthError string
}

type callerKey struct{}

// NewContext returns ctx carrying c. Only transports call it, after
// verifying the caller; the key is unexported so nothing else can.
func NewContext(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller a transport attached to ctx, or nil.
func CallerFrom(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}
