package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rt22NonLoopbackIP is an address of this machine other hosts reach (not
// loopback), where a test listens as "another machine" would.
func rt22NonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatal("no non-loopback IPv4 address on this machine")
	return ""
}

// TestRedTeam22RedisPasswordPlaintextToRemote
//
// Attack: an operator points serve at a Redis on another machine with
// --redis-addr=<remote>:6379 and --redis-password (or
// FENCEGATE_REDIS_PASSWORD), without --redis-tls. A "Redis" on a
// non-loopback address of this host stands for the remote one and
// records what it is sent.
//
// What happened: serve starts dialing and sends the password in the clear
// (RESP AUTH / HELLO ... AUTH) to the other machine, before anything
// checks whether that is wise: anyone on the path reads the Redis
// password, which is the key to every fenced key and to the fence tokens
// themselves (fencegate:{fence}:token). For etcd the very same mistake is
// refused at start (checkEtcdEndpoints: "--etcd-password would go in
// plain text to ...: use https:// endpoints with --etcd-cacert (or
// --insecure)"); for Redis nothing guards it.
//
// What should happen: as for --etcd-password, serve refuses to start,
// naming --redis-password, when it would go in plain text to a
// non-loopback --redis-addr (or --redis-lease-addr) without --redis-tls,
// unless --insecure is given; and nothing is sent.
//
// Severity: medium (credential disclosure on the network; inconsistent
// with the etcd guard operators rely on).
func TestRedTeam22RedisPasswordPlaintextToRemote(t *testing.T) {
	bin := rt2Binary(t)
	const secret = "rt22-redis-s3cret-Zq9"
	lis, err := net.Listen("tcp", net.JoinHostPort(rt22NonLoopbackIP(t), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	got := make(chan []byte, 16)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 4096)
				n, _ := c.Read(buf)
				got <- append([]byte(nil), buf[:n]...)
				_, _ = c.Write([]byte("-ERR no\r\n"))
			}(c)
		}
	}()

	errPath := filepath.Join(t.TempDir(), "serve.err")
	f, err := os.Create(errPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, "serve", "--etcd-endpoints=", "--term-sources=*=monotonic",
		"--redis-addr="+lis.Addr().String(), "--redis-user=fencegate",
		"--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0")
	cmd.Env = append(os.Environ(), "FENCEGATE_REDIS_PASSWORD="+secret)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	var seen []byte
	deadline := time.After(20 * time.Second)
wait:
	for {
		select {
		case b := <-got:
			seen = append(seen, b...)
			if bytes.Contains(seen, []byte(secret)) {
				break wait
			}
		case <-exited:
			exited <- nil
			break wait
		case <-deadline:
			break wait
		}
	}
	out, _ := os.ReadFile(errPath)
	if bytes.Contains(seen, []byte(secret)) {
		t.Errorf("serve sent --redis-password in plain text to the non-loopback Redis %s; wire bytes: %q\nserve said:\n%s",
			lis.Addr(), seen, out)
	}
	if !strings.Contains(string(out), "--redis-password") {
		t.Errorf("serve did not refuse, naming --redis-password, as it refuses --etcd-password in plain text; it said:\n%s", out)
	}
}
