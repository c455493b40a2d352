package redislease_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/fencegate/fencegate/proxy/redis/throwaway"
)

var redisAddr string

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	srv, err := throwaway.Start(context.Background(), throwaway.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	redisAddr = srv.Addr()
	code := m.Run()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

var seq atomic.Int64

func unique(prefix string) string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }
