package resp_test

import (
	"context"
	"errors"
	"log"
	"net"
	"time"

	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
)

// ExampleServer serves RESP in front of a gateway's Redis backend until
// ctx ends, then lets connections finish what they read. Clients log in
// with AUTH <fence> <token> (redis-cli --user jobs --pass 42).
func ExampleServer() {
	var gw *proxy.Gateway // proxy.New(cfg, proxy.Options{Terms: ..., Redis: ...})
	ctx := context.Background()

	srv, err := resp.New(gw, resp.Config{})
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:7379")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, resp.ErrServerClosed) {
		log.Fatal(err)
	}
}
