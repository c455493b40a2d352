package resp_test

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/redis"
)

// benchListener is a RESP listener in front of the throwaway Redis, as
// newEnv builds one for tests, and a fence this process leads.
func benchListener(b *testing.B) (addr, fence string, tok uint64) {
	b.Helper()
	ctx := b.Context()
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	w, err := election.NewWatcher(cli, election.WatcherConfig{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(wctx) })
	b.Cleanup(func() { cancel(); wg.Wait() })
	rd, err := redis.Open(ctx, redisServer.Addr(), redis.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rd.Close() })
	gw, err := proxy.New(proxy.DefaultConfig(), proxy.Options{Terms: w, Redis: rd})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := resp.New(gw, resp.Config{})
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	b.Cleanup(func() {
		sctx, c := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer c()
		_ = srv.Shutdown(sctx)
		<-done
	})

	fence = unique("bench")
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	el := concurrency.NewElection(s, prefix+"/"+fence)
	if err := el.Campaign(ctx, "leader"); err != nil {
		b.Fatal(err)
	}
	tok = uint64(el.Rev())
	for deadline := time.Now().Add(10 * time.Second); w.Term(fence).Rev != int64(tok); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the listener's watch did not deliver the term")
		}
	}
	return lis.Addr().String(), fence, tok
}

// BenchmarkRoundTrip: one command per round trip, the common path of a
// client that waits for each reply (PING answered by fencegate, INCR run
// in Redis). The client side allocates nothing, so allocs/op are the
// listener's and the gateway's.
func BenchmarkRoundTrip(b *testing.B) {
	addr, fence, tok := benchListener(b)
	for _, bc := range []struct{ name, cmd, want string }{
		{"PING", cmd("PING"), "+PONG\r\n"},
		{"INCR", cmd("INCR", "{"+fence+"}:n"), ":"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			if _, err := c.Write([]byte(cmd("AUTH", fence, strconv.FormatUint(tok, 10)))); err != nil {
				b.Fatal(err)
			}
			if l, err := br.ReadString('\n'); err != nil || l != "+OK\r\n" {
				b.Fatalf("AUTH: got %q, %v", l, err)
			}
			req := []byte(bc.cmd)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				l, err := br.ReadSlice('\n')
				if err != nil || len(l) < len(bc.want) || string(l[:len(bc.want)]) != bc.want {
					b.Fatalf("got %q, %v; want %q...", l, err, bc.want)
				}
			}
		})
	}
}
