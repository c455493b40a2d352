package api_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/fencegate/fencegate/api"
	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
)

// TestRedTeam18GRPCStreamNeverClosed: the HTTP port bounds how long a
// client may take to send its request (HTTPServerConfig: ReadHeaderTimeout,
// ReadTimeout 30 s by default: "a connection that sends its request slowly
// (slowloris)"; TestSlowlorisCutOff). The gRPC port, with the options serve
// uses (ServerOptions: message size, metadata size, 1024 streams per
// connection; no keepalive enforcement, no MaxConnectionAge, no
// connection limit), bounds it not at all: a client opens an Exec stream,
// sends its headers (a Fencing-Token included) and never sends the
// request message nor ends the stream. grpc-go holds the stream and a
// goroutine blocked reading the message for as long as the client likes;
// 1024 such streams per connection, over as many connections as the
// client opens, with no identity needed (authentication runs in the
// interceptor, after the message is read).
// Expected: like HTTP, the server ends a request that has not arrived
// within the read timeout (here: still open past DefaultHTTPServerConfig's
// ReadTimeout plus 5 s is the hole).
func TestRedTeam18GRPCStreamNeverClosed(t *testing.T) {
	_, conn, _ := rtGRPCServer(t, 64<<10)
	const n = 64
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(t.Context(), "fencing-token", "1"))
	ended := make(chan error, n)
	for range n {
		s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/fencegate.v1.Gateway/Exec")
		if err != nil {
			t.Fatal(err)
		}
		go func() { ended <- s.RecvMsg(new(fencegatev1.ExecResponse)) }()
	}
	closed := 0
	defer func() {
		cancel()
		for ; closed < n; closed++ {
			<-ended
		}
	}()
	bound := api.DefaultHTTPServerConfig().ReadTimeout + 5*time.Second
	deadline := time.After(bound)
	for closed < n {
		select {
		case <-ended:
			closed++
		case <-deadline:
			t.Errorf("HOLE: %d of %d gRPC Exec streams whose request message never came are still open %v after they started "+
				"(the HTTP port cuts such a request off after its %v read timeout)", n-closed, n, bound, api.DefaultHTTPServerConfig().ReadTimeout)
			return
		}
	}
}
