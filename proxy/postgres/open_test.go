package postgres

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}

func TestOpenUnreachableNamesHostNotPassword(t *testing.T) {
	t.Parallel()
	port := strconv.Itoa(closedPort(t))
	_, err := Open(t.Context(), "postgres://app:s3cret@127.0.0.1:"+port+"/db?sslmode=disable", Config{})
	if err == nil {
		t.Fatal("Open: got nil, want an error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "127.0.0.1:"+port) || strings.Contains(msg, "s3cret") || strings.Contains(msg, "\n") {
		t.Errorf("error: got %q, want one line naming 127.0.0.1:%s without the password", msg, port)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate(): got %v, want nil", err)
	}
	bad := []Config{
		{MaxConns: -1},
		{StatementTimeout: -1},
		{ConnectTimeout: -1},
	}
	for _, c := range bad {
		if err := c.withDefaults().Validate(); err == nil {
			t.Errorf("Validate(%+v): got nil, want an error", c)
		}
	}
}
