package pgwire_test

import (
	"crypto/tls"
	"encoding/binary"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/api/pgwire"
)

// TestUnixSocketSSLRequestFlood: on a Unix socket the listener answers
// every SSLRequest 'N', as PostgreSQL does there, even with TLS
// configured. A client that sends SSLRequest after SSLRequest, never a
// startup message, still holds its connection no longer than the startup
// timeout.
func TestUnixSocketSSLRequestFlood(t *testing.T) {
	ca := authtest.NewCA(t, "pgwire-unix")
	cert := ca.Localhost(t, "fencegate")
	const timeout = 500 * time.Millisecond
	e := newEnv(t, pgwire.Config{
		StartupTimeout: timeout,
		TLS: func() *tls.Config {
			return &tls.Config{Certificates: []tls.Certificate{cert.TLS}, MinVersion: tls.VersionTLS12}
		},
	})
	path := filepath.Join(t.TempDir(), ".s.PGSQL."+e.port)
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.srv.Serve(lis) }() // newEnv's cleanup shuts the server down, closing lis

	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), 80877103)
	start := time.Now()
	answers := 0
	for {
		if _, err := c.Write(req); err != nil {
			break
		}
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			break
		}
		if b[0] != 'N' {
			t.Fatalf("SSLRequest %d on the Unix socket: got %q, want 'N'", answers+1, b[0])
		}
		answers++
	}
	took := time.Since(start)
	if answers == 0 {
		t.Fatal("no SSLRequest answered")
	}
	if took > timeout+2*time.Second {
		t.Fatalf("the connection stayed open %v after %d SSLRequests, want it closed by the %v startup timeout", took, answers, timeout)
	}
	t.Logf("%d SSLRequests answered 'N', connection closed after %v", answers, took.Round(time.Millisecond))
}
