package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/election/freeport"
)

// TestRedTeam25DevEtcdWritableFromWebPages
//
// Attack: a developer runs `fencegate dev` (its embedded etcd on
// http://127.0.0.1:2379, loopback only, as round 22 made sure) and, while a
// worker leads election "jobs", opens any web page. The page's script
// sends, as a no-cors "simple request" every browser allows without a
// preflight (Content-Type text/plain, Origin https://attacker.example,
// Sec-Fetch-Site cross-site):
//
//	fetch("http://127.0.0.1:2379/v3/kv/deleterange", {method: "POST",
//	      mode: "no-cors", body: '{"key":"<b64 /fencegate/elections/>",
//	      "range_end":"<b64 /fencegate/elections0>"}'})
//
// What happened (on this code): the embedded etcd serves etcd's JSON gateway
// (/v3/...) with embed's defaults, CORS "*" and any Host, and runs the
// request: every candidate key of every election is deleted, the worker's
// term ends (fencectl run kills its CMD), and the page could as well put a
// key of its own in an election to become its leader and mint its term.
// A preflighted fetch is answered Access-Control-Allow-Origin: *, so the
// page can also read every election, leader and token. Round 22 refused
// cross-site requests to the gateway's HTTP port and cross-protocol ones
// to the RESP listener; the term authority on the next port takes them.
//
// What should happen: dev's embedded etcd refuses browsers: no CORS
// (embed.Config.CORS empty), a Host allowlist of loopback names against DNS
// rebinding (HostWhitelist), or its JSON gateway off
// (EnableGRPCGateway=false: fencegate and etcdctl speak gRPC).
//
// Severity: medium (any web page a developer visits ends or takes over the
// leadership of every election of a dev instance; dev only).
func TestRedTeam25DevEtcdWritableFromWebPages(t *testing.T) {
	etcdAddr := freeport.Addr(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{
			"dev", "--etcd-listen=http://" + etcdAddr, "--grpc-addr=" + freeport.Addr(t), "--http-addr=" + freeport.Addr(t),
			"--pg-listen-addr=" + freeport.Addr(t), "--redis-listen-addr=" + freeport.Addr(t),
		}, &stdout, &stderr)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("dev did not stop within 20s")
		}
	}()
	waitFor(t, "dev's banner", func() bool {
		select {
		case err := <-done:
			t.Fatalf("dev exited early: %v\n%s", err, stderr.String())
		default:
		}
		return strings.Contains(stdout.String(), "ETCDCTL_ENDPOINTS")
	})

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + etcdAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	el := concurrency.NewElection(s, "/fencegate/elections/jobs")
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	if err := el.Campaign(cctx, "worker-1"); err != nil {
		t.Fatal(err)
	}

	b64 := base64.StdEncoding.EncodeToString
	body := fmt.Sprintf(`{"key":%q,"range_end":%q}`, b64([]byte("/fencegate/elections/")), b64([]byte("/fencegate/elections0")))
	req, err := http.NewRequest(http.MethodPost, "http://"+etcdAddr+"/v3/kv/deleterange", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	// As Chrome sends a no-cors fetch() from a page of another site.
	req.Header.Set("Content-Type", "text/plain;charset=UTF-8")
	req.Header.Set("Origin", "https://attacker.example")
	req.Header.Set("Referer", "https://attacker.example/")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Sec-Fetch-Mode", "no-cors")
	req.Header.Set("Sec-Fetch-Dest", "empty")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("etcd answered the page's POST %d (Access-Control-Allow-Origin %q): %.200s", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), answer)

	got, err := cli.Get(ctx, "/fencegate/elections/jobs/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if got.Count == 0 {
		t.Errorf("HOLE: a cross-site no-cors POST from a web page to dev's embedded etcd (127.0.0.1) deleted every election key: the leader of jobs (token %d) lost its term", el.Rev())
	}
}
