package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/fencegate/fencegate/api/auth/authtest"
)

// ops23Binary is fencegate built from this tree with go build into a
// temporary directory (quicker than fencegateBinary's Dockerfile build
// stage; the same code).
func ops23Binary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fencegate")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/fencegate").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/fencegate: %v\n%s", err, out)
	}
	return bin
}

// TestOps23ExampleOverlayConfigAccepted starts the fencegate this tree
// builds exactly as the rendered deploy/kubernetes/example Deployment
// would: the container's args, and the environment of its envFrom
// (ConfigMap fencegate-config, Secret fencegate-backends), with the
// mounted TLS Secret and policy ConfigMap replaced by local files.
//
// What's wrong: the overlay sets FENCEGATE_REDIS_ADDR=redis.data:6379 and
// FENCEGATE_REDIS_PASSWORD, but no --redis-tls. serve refuses to send
// --redis-password in plain text beyond loopback (README, Configuration;
// checkRedisAddrs), so every replica exits at once with status 2:
// "--redis-password would go in plain text to --redis-addr
// redis.data:6379: use --redis-tls ...". What an on-call engineer sees
// after `kubectl apply -k`: all pods in CrashLoopBackOff (and in a
// rollout of a copied overlay, the new ReplicaSet never gets ready).
// TestKubernetesManifests only checks that each variable names a flag, not
// that serve accepts the combination.
//
// What should be: the example passes serve's configuration checks: add
// FENCEGATE_REDIS_TLS_CA_FILE=/etc/fencegate/tls/ca.crt (Redis with TLS,
// as the example already does for etcd and PostgreSQL), or point it at a
// Redis without a password. This test accepts any failure except a
// refused configuration (exit status 2): etcd's names do not resolve here.
func TestOps23ExampleOverlayConfigAccepted(t *testing.T) {
	bin := ops23Binary(t)
	objs := decodeManifests(t, "kustomize kubernetes/example", kustomize(t, filepath.Join(kubeDir, "example")))
	dep := only[*appsv1.Deployment](t, objs, "Deployment")
	c := dep.Spec.Template.Spec.Containers[0]

	// The mounts, as local directories.
	dir := t.TempDir()
	ca := authtest.NewCA(t, "ops23")
	leaf := ca.Issue(t, "fencegate", authtest.Leaf{DNSNames: []string{"fencegate"}})
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		local := filepath.Join(dir, m.Name)
		if err := os.MkdirAll(local, 0o755); err != nil {
			t.Fatal(err)
		}
		mounts[m.MountPath] = local
		for _, v := range dep.Spec.Template.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			switch {
			case v.Secret != nil:
				for name, src := range map[string]string{"tls.crt": leaf.CertFile, "tls.key": leaf.KeyFile, "ca.crt": ca.File} {
					b, err := os.ReadFile(src)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(local, name), b, 0o440); err != nil {
						t.Fatal(err)
					}
				}
			case v.ConfigMap != nil:
				data, ok := configMapData(objs, v.ConfigMap.Name)
				if !ok {
					t.Fatalf("no ConfigMap %s in the rendering", v.ConfigMap.Name)
				}
				for name, content := range data {
					if err := os.WriteFile(filepath.Join(local, name), []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	local := func(s string) string {
		for mount, dir := range mounts {
			s = strings.ReplaceAll(s, mount, dir)
		}
		return s
	}

	var args []string
	for _, a := range c.Args {
		args = append(args, local(a))
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	for _, from := range c.EnvFrom {
		var data map[string]string
		var ok bool
		switch {
		case from.ConfigMapRef != nil:
			data, ok = configMapData(objs, from.ConfigMapRef.Name)
		case from.SecretRef != nil:
			data, ok = secretData(objs, from.SecretRef.Name)
		}
		if !ok {
			t.Fatalf("envFrom %+v: not in the rendering", from)
		}
		for k, v := range data {
			env = append(env, k+"="+local(v))
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 2 {
		t.Errorf("fencegate %s\nwith the example's environment refuses its configuration (exit 2):\n%s",
			strings.Join(c.Args, " "), strings.TrimSpace(out.String()))
	}
}

// ops23PromtoolTest runs `promtool test rules` on tests against a copy of
// deploy/prometheus/alerts.yml.
func ops23PromtoolTest(t *testing.T, tests string) {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Skip("no promtool (make deps)")
	}
	dir := t.TempDir()
	rules, err := os.ReadFile(filepath.Join("prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "tests.yml")
	if err := os.WriteFile(file, []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("promtool", "test", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}

// TestOps23ElectionWithoutLeaderSurvivesReplicaRestart: an election lost
// its leader, FencegateElectionWithoutLeader fires, and then the fencegate
// replicas are replaced (a rollout, or `kubectl rollout restart` by the
// on-call engineer investigating).
//
// What's wrong: fencegate exports fencegate_election_has_leader only for
// elections its watch holds; a replica started after the last key of an
// election went away never learns it (checked: a `fencegate serve`
// started beside a `fencegate dev` whose election "jobs" had lost its
// leader exports no fencegate_election_* series at all, while the old
// replica exports has_leader 0). The old replicas' series go stale, the
// rule's `max by (election) (fencegate_election_has_leader) == 0` is
// empty, and the alert resolves although nobody took over. What the
// on-call engineer sees: the page clears by itself minutes after
// restarting fencegate, and the dashboard's "Elections without a leader"
// drops to 0, while the job is still not running.
//
// What should be: the alert keeps firing until a leader appears or the
// 30-minute window passes, e.g.
//
//	max by (election) (max_over_time(fencegate_election_has_leader[30m])) == 1
//	unless max by (election) (fencegate_election_has_leader == 1)
//
// (that also passes every test in alerts_test.yml).
func TestOps23ElectionWithoutLeaderSurvivesReplicaRestart(t *testing.T) {
	ops23PromtoolTest(t, `rule_files: [alerts.yml]
evaluation_interval: 1m
tests:
  - name: replicas replaced after an election lost its leader
    interval: 1m
    input_series:
      # Old replicas a, b: the leader left at 10m; replaced at 17m.
      - series: 'fencegate_election_has_leader{instance="a:9090",election="jobs"}'
        values: '1x9 0x6 stale'
      - series: 'fencegate_election_has_leader{instance="b:9090",election="jobs"}'
        values: '1x9 0x6 stale'
      # New replicas c, d: no key of election jobs in etcd, no series for it.
      - series: 'fencegate_ready{instance="c:9090"}'
        values: '_x16 1x20'
      - series: 'fencegate_ready{instance="d:9090"}'
        values: '_x16 1x20'
    alert_rule_test:
      - eval_time: 12m
        alertname: FencegateElectionWithoutLeader
        exp_alerts:
          - exp_labels: {severity: warning, election: jobs}
            exp_annotations:
              summary: "election jobs lost its leader and nobody has taken over for 2 minutes"
      - eval_time: 25m
        alertname: FencegateElectionWithoutLeader
        exp_alerts:
          - exp_labels: {severity: warning, election: jobs}
            exp_annotations:
              summary: "election jobs lost its leader and nobody has taken over for 2 minutes"
`)
}

// TestOps23ZombieWriteOnFreshReplicaPages: a zombie write refused by a
// replica Prometheus has not scraped yet.
//
// What's wrong: alerts.yml counts on fencegate_requests_total existing "from
// the start at 0", but Prometheus only sees it from its first scrape of the
// replica. In Kubernetes every rollout makes new pods (new instance
// labels); a pod takes writes once its readinessProbe passes (every 5s),
// while the ServiceMonitor scrapes every 15s after discovery. A zombie
// write in that gap makes the series' first sample 1, increase() sees
// nothing, and FencegateZombieWritesRefused — the one alert meant to "page
// at once, on the first one" — never fires. Rollouts are exactly when
// workers restart and leadership changes. What the on-call engineer
// sees: no page, only the dashboard's per-fence counter (which has the
// same blind spot) or the log line.
//
// What should be: the first sample of a new series counts too, e.g.
//
//	sum by (backend, outcome) (increase(fencegate_requests_total{outcome=~"stale_token|term_ended"}[5m])) > 0
//	or sum by (backend, outcome) (fencegate_requests_total{outcome=~"stale_token|term_ended"}
//	     unless fencegate_requests_total{outcome=~"stale_token|term_ended"} offset 5m) > 0
//
// (passes this test and every test in alerts_test.yml).
func TestOps23ZombieWriteOnFreshReplicaPages(t *testing.T) {
	ops23PromtoolTest(t, `rule_files: [alerts.yml]
evaluation_interval: 1m
tests:
  - name: a zombie write on a new replica before its first scrape
    interval: 1m
    input_series:
      - series: 'fencegate_requests_total{instance="c:9090",backend="postgres",outcome="stale_token"}'
        values: '_ _ 1x10'
      - series: 'fencegate_requests_total{instance="c:9090",backend="postgres",outcome="term_ended"}'
        values: '_ _ 0x10'
    alert_rule_test:
      - eval_time: 4m
        alertname: FencegateZombieWritesRefused
        exp_alerts:
          - exp_labels: {severity: critical, backend: postgres, outcome: stale_token}
            exp_annotations:
              summary: "fencegate refused postgres writes from ended terms (stale_token): a worker writes after losing its leadership"
`)
}
