package deploy_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/election/freeport"
)

// startProcess starts a child process, stopped with SIGINT (then killed) when the
// test ends; killed with the test binary too.
func startProcess(t *testing.T, logFile, name string, args ...string) {
	t.Helper()
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); out.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func httpGet(c *http.Client, u string) (int, []byte, error) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// livePolicy lets the workers' bearer token do anything.
const livePolicy = `rules:
  - name: workers
    principals: ["token:worker"]
    fences: ["*"]
    actions: [sql.write, redis.write, fence.read]
`

// TestLivePrometheus runs the fencegate this tree builds (fencegate dev:
// embedded etcd, throwaway PostgreSQL and Redis) as it is deployed: TLS,
// a bearer token, a policy, and --metrics-addr scraped by a real
// Prometheus (every second) that evaluates deploy/prometheus/alerts.yml.
// Workers write through it; a leader's successor takes over and the old
// leader writes again. Prometheus must fire FencegateZombieWritesRefused,
// every dashboard query must return data, and every metric the dashboard
// and the alerts name must be one fencegate exports.
func TestLivePrometheus(t *testing.T) {
	bin := fencegateBinary(t)
	dir := t.TempDir()
	ca := authtest.NewCA(t, "live")
	srv := ca.Localhost(t, "gateway")
	secret := "worker-secret"
	sum := sha256.Sum256([]byte(secret))
	tokens := filepath.Join(dir, "tokens")
	policyFile := filepath.Join(dir, "policy.yaml")
	for f, content := range map[string]string{tokens: "worker " + hex.EncodeToString(sum[:]) + "\n", policyFile: livePolicy} {
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	etcdAddr, httpAddr, metricsAddr, promAddr := freeport.Addr(t), freeport.Addr(t), freeport.Addr(t), freeport.Addr(t)
	startProcess(t, filepath.Join(dir, "fencegate.log"), bin, "dev",
		"--etcd-listen=http://"+etcdAddr, "--grpc-addr="+freeport.Addr(t), "--http-addr="+httpAddr,
		"--pg-listen-addr="+freeport.Addr(t), "--redis-listen-addr="+freeport.Addr(t), "--metrics-addr="+metricsAddr,
		"--cert-file="+srv.CertFile, "--key-file="+srv.KeyFile, "--token-auth-file="+tokens, "--policy-file="+policyFile)
	plain := &http.Client{Timeout: 5 * time.Second}
	waitFor(t, "fencegate ready on --metrics-addr", 2*time.Minute, func() error {
		code, body, err := httpGet(plain, "http://"+metricsAddr+"/readyz")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s (log: %s)", code, body, readTail(filepath.Join(dir, "fencegate.log")))
		}
		return err
	})

	// Prometheus, as deploy/compose runs it, but scraping every second.
	rules, err := os.ReadFile(filepath.Join("prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	promCfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [alerts.yml]
scrape_configs:
  - job_name: fencegate
    static_configs:
      - targets: [%q]
`, metricsAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(promCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	startProcess(t, filepath.Join(dir, "prometheus.log"), "prometheus",
		"--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	prom := "http://" + promAddr
	waitFor(t, "Prometheus ready", time.Minute, func() error {
		code, body, err := httpGet(plain, prom+"/-/ready")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s", code, body)
		}
		return err
	})

	// Workers: a leader writes, resigns, its successor writes, and the old
	// leader writes again with its ended term.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + etcdAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	campaign := func(name string) (*concurrency.Election, *concurrency.Session) {
		t.Helper()
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
		if err != nil {
			t.Fatal(err)
		}
		e := concurrency.NewElection(s, "/fencegate/elections/jobs")
		if err := e.Campaign(t.Context(), name); err != nil {
			t.Fatal(err)
		}
		return e, s
	}
	api := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	write := func(token int64, kind, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, "https://"+httpAddr+"/v1/fences/jobs/"+kind, strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Fencing-Token", fmt.Sprint(token))
		req.Header.Set("Content-Type", "application/json")
		resp, err := api.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const redisWrite, sqlWrite = `{"commands":[["INCR","{jobs}:n"]]}`, `{"statements":[{"sql":"SELECT 1"}]}`
	mustWrite := func(token int64) {
		t.Helper()
		for _, w := range [][2]string{{"redis", redisWrite}, {"sql", sqlWrite}} {
			// The first write of a new term may race the watch; the
			// gateway verifies it in etcd, so it must be accepted.
			if code, body := write(token, w[0], w[1]); code != http.StatusOK {
				t.Fatalf("%s write with token %d: got %d %s, want 200", w[0], token, code, body)
			}
		}
	}
	e1, s1 := campaign("worker-1")
	t1 := e1.Rev()
	mustWrite(t1)
	if err := e1.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	e2, s2 := campaign("worker-2")
	defer s2.Close()
	t2 := e2.Rev()
	mustWrite(t2)

	// The successor keeps writing, so rates have data.
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			write(t2, "redis", redisWrite)
			write(t2, "sql", sqlWrite)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	defer func() { cancel(); wg.Wait() }()

	// Prometheus has scraped the zero before the zombie writes.
	waitFor(t, "Prometheus scraping fencegate", 30*time.Second, func() error {
		return queryHasData(plain, prom, `fencegate_requests_total{outcome="accepted"} > 0`)
	})
	started := time.Now()
	for _, w := range [][2]string{{"redis", redisWrite}, {"sql", sqlWrite}} {
		if code, body := write(t1, w[0], w[1]); code != http.StatusConflict || !strings.Contains(body, "STALE_TOKEN") {
			t.Fatalf("zombie %s write with token %d after term %d: got %d %s, want 409 STALE_TOKEN", w[0], t1, t2, code, body)
		}
	}

	t.Run("zombie refusal alert fires", func(t *testing.T) {
		want := map[string]bool{"redis": false, "postgres": false}
		waitFor(t, "FencegateZombieWritesRefused firing for both backends", 30*time.Second, func() error {
			alerts, err := firingAlerts(plain, prom)
			if err != nil {
				return err
			}
			for _, a := range alerts {
				if a["alertname"] == "FencegateZombieWritesRefused" && a["outcome"] == "stale_token" {
					want[a["backend"]] = true
				}
			}
			if !want["redis"] || !want["postgres"] {
				return fmt.Errorf("firing: %v", alerts)
			}
			return nil
		})
		t.Logf("FencegateZombieWritesRefused firing for both backends %v after the zombie writes", time.Since(started).Round(100*time.Millisecond))
	})

	t.Run("dashboard queries return data", func(t *testing.T) {
		queries := dashboardQueries(t)
		var failing []string
		// Rates need a few scrapes after the writes began.
		waitFor(t, "every dashboard query returning data", 30*time.Second, func() error {
			failing = failing[:0]
			for _, q := range queries {
				if err := queryHasData(plain, prom, q.expr); err != nil {
					failing = append(failing, fmt.Sprintf("%s: %s: %v", q, q.expr, err))
				}
			}
			if len(failing) > 0 {
				return fmt.Errorf("%d of %d queries:\n%s", len(failing), len(queries), strings.Join(failing, "\n"))
			}
			return nil
		})
	})

	t.Run("dashboard and alerts name only exported metrics", func(t *testing.T) {
		_, body, err := httpGet(plain, "http://"+metricsAddr+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		exported := exportedNames(string(body))
		// Prometheus's own series of each scrape target (FencegateReplicaDown).
		exported["up"] = true
		for _, q := range dashboardQueries(t) {
			for _, name := range metricNames(q.expr) {
				if !exported[name] {
					t.Errorf("%s: metric %s: fencegate exports no such metric", q, name)
				}
			}
		}
		for alert, expr := range alertExprs(t) {
			for _, name := range metricNames(expr) {
				if !exported[name] {
					t.Errorf("alert %s: metric %s: fencegate exports no such metric", alert, name)
				}
			}
		}
	})
}

// exportedNames is the sample names of a /metrics page: each family's
// name, and a histogram's or summary's _bucket, _sum and _count.
func exportedNames(page string) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(page))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		names[f[2]] = true
		switch f[3] {
		case "histogram":
			names[f[2]+"_bucket"], names[f[2]+"_sum"], names[f[2]+"_count"] = true, true, true
		case "summary":
			names[f[2]+"_sum"], names[f[2]+"_count"] = true, true
		}
	}
	return names
}

// queryHasData runs an instant query and fails unless it returns at
// least one sample.
func queryHasData(c *http.Client, prom, expr string) error {
	code, body, err := httpGet(c, prom+"/api/v1/query?query="+url.QueryEscape(expr))
	if err != nil {
		return err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%d %s", code, body)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s", r.Status, r.Error)
	}
	if r.Data.ResultType == "scalar" {
		return nil
	}
	if len(r.Data.Result) == 0 {
		return fmt.Errorf("no data")
	}
	return nil
}

// firingAlerts is the labels of the alerts Prometheus has firing.
func firingAlerts(c *http.Client, prom string) ([]map[string]string, error) {
	_, body, err := httpGet(c, prom+"/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, a := range r.Data.Alerts {
		if a.State == "firing" {
			out = append(out, a.Labels)
		}
	}
	return out, nil
}

// readTail is the last lines of a log file, for failure messages.
func readTail(file string) string {
	b, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}
