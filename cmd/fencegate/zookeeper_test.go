package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/election/freeport"
	"github.com/fencegate/fencegate/election/zookeeper/throwaway"
)

// TestDevZooKeeper: fencegate with a fence routed to a ZooKeeper election
// admits its leader's token and refuses a forged one, and /readyz fails
// once the ZooKeeper session is lost.
func TestDevZooKeeper(t *testing.T) {
	srv, err := throwaway.Start(t.Context(), throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	conn, _, err := zk.Connect([]string{srv.Addr()}, 2*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, p := range []string{"/fencegate", "/fencegate/elections", "/fencegate/elections/zk-a"} {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	node, err := conn.Create("/fencegate/elections/zk-a/latch-", []byte("w1"), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	_, st, err := conn.Exists(node)
	if err != nil {
		t.Fatal(err)
	}

	etcdAddr, grpcAddr, httpAddr := freeport.Addr(t), freeport.Addr(t), freeport.Addr(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{
			"dev", "--etcd-listen=http://" + etcdAddr, "--grpc-addr=" + grpcAddr, "--http-addr=" + httpAddr,
			"--pg-listen-addr=", "--redis-listen-addr=",
			"--term-sources=zk-*=zookeeper", "--zookeeper-servers=" + srv.Addr(), "--zookeeper-session-timeout=2s",
		}, &stdout, &stderr)
	}()
	defer func() { cancel(); <-done }()
	waitReady(t, httpAddr, done, &stderr)

	write := func(token int64) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+httpAddr+"/v1/fences/zk-a/sql",
			strings.NewReader(`{"statements":[{"sql":"SELECT 1"}]}`))
		req.Header.Set("Fencing-Token", fmt.Sprint(token))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := write(st.Czxid); code != http.StatusOK {
		t.Fatalf("leader's token %d: got %d %s, want 200", st.Czxid, code, body)
	}
	if code, body := write(st.Czxid + 100); code != http.StatusBadRequest || !strings.Contains(body, "UNKNOWN_TERM") {
		t.Fatalf("forged token: got %d %s, want 400 UNKNOWN_TERM", code, body)
	}

	srv.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "ZooKeeper") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with ZooKeeper gone: got %d %s, want 503 naming ZooKeeper", resp.StatusCode, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
