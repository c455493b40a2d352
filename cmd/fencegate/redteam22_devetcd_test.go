package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/election/freeport"
)

// TestRedTeam22DevEtcdListensBeyondLoopback
//
// Attack: `fencegate dev --etcd-listen=http://<a non-loopback address>:P`
// (or http://0.0.0.0:P, to "let a colleague try it"), without --insecure.
// Then, as another host, connect to that address and write into the
// elections prefix.
//
// What happened: dev starts. Its embedded etcd serves plain HTTP with no
// authentication on an address other hosts reach, and the remote client
// writes /fencegate/elections/... at will: it can make itself leader of
// any election (minting valid fencing tokens), or delete the real
// leader's key to end its term. dev refuses the same exposure on every
// other address it listens on (--grpc-addr, --http-addr, --pg-listen-addr,
// --redis-listen-addr go through checkExposure and need --insecure), and
// DESIGN.md / --help describe dev as serving on loopback; --etcd-listen
// is the one listener that is never checked, although etcd is where the
// terms, the root of the fencing guarantee, come from.
//
// What should happen: dev refuses a non-loopback --etcd-listen without
// --insecure with a usage error naming --etcd-listen, before starting
// anything.
//
// Severity: medium (network-reachable, unauthenticated write access to the
// term authority of a dev instance; it defeats the loopback-only promise).
func TestRedTeam22DevEtcdListensBeyondLoopback(t *testing.T) {
	bin := rt2Binary(t)
	ip := rt22NonLoopbackIP(t)
	_, port, _ := net.SplitHostPort(freeport.Addr(t))
	etcdURL := "http://" + net.JoinHostPort(ip, port)
	dir := t.TempDir()
	errPath := filepath.Join(dir, "dev.err")
	f, err := os.Create(errPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, "dev", "--etcd-listen="+etcdURL,
		"--grpc-addr="+freeport.Addr(t), "--http-addr="+freeport.Addr(t),
		"--pg-listen-addr="+freeport.Addr(t), "--redis-listen-addr="+freeport.Addr(t))
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
			return
		default:
		}
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	out := func() string { b, _ := os.ReadFile(errPath); return string(b) }
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(out(), "fencegate dev is up") {
		select {
		case err := <-exited:
			exited <- err
			if !strings.Contains(out(), "--etcd-listen") {
				t.Errorf("dev exited (%v) without naming --etcd-listen:\n%s", err, out())
			}
			return // refused: the safe behaviour
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev neither refused nor came up in 90s:\n%s", out())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// dev is up: act as another host on the network.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	put, err := cli.Put(ctx, "/fencegate/elections/payments/rt22-attacker", "attacker")
	if err != nil {
		t.Fatalf("dev came up on %s; remote put: %v\n%s", etcdURL, err, out())
	}
	t.Errorf("dev started with --etcd-listen=%s (reachable from other hosts) without --insecure: an unauthenticated client "+
		"over the network became a candidate of election payments at revision %s (a fencing token it may now use)\ndev said:\n%s",
		etcdURL, strconv.FormatInt(put.Header.Revision, 10), out())
}
