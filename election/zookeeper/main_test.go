package zookeeper_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/fencegate/fencegate/election/zookeeper/throwaway"
)

// zkAddr is the throwaway ZooKeeper server every test of the package uses.
var zkAddr string

func TestMain(m *testing.M) {
	srv, err := throwaway.Start(context.Background(), throwaway.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	zkAddr = srv.Addr()
	code := m.Run()
	srv.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
