package redis

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fencegate/fencegate/proxy/redis/throwaway"
)

var (
	server  *throwaway.Server
	backend *Backend // shared by the tests; DefaultConfig
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	ctx := context.Background()
	// Two databases, so that the cross-database attacks have somewhere to
	// go and their tests can see whether they got there.
	srv, err := throwaway.Start(ctx, throwaway.Options{Databases: 2, UnixSocket: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	server = srv
	b, err := Open(ctx, srv.Addr(), DefaultConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	backend = b
	code := m.Run()
	if err := b.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

var seq atomic.Int64

// unique returns a fence name no other test uses.
func unique(prefix string) string { return fmt.Sprintf("%s_%d", prefix, seq.Add(1)) }

// key returns a key of fence's slot.
func key(fence, name string) string { return "{" + fence + "}:" + name }

// admin returns a plain client for setting up and checking state.
func admin(t *testing.T) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: server.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
