package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestRedTeam27NoCriticalAlertWhenEveryReplicaIsDown
//
// Attack/Problem: every fencegate replica goes down at once and stays
// down: the shape of a real outage, not a contrived one. `serve` dials etcd
// and the backends before it listens and exits when it cannot reach them
// (deploy/kubernetes/base/deployment.yaml says so), so an etcd or
// PostgreSQL outage across a rollout, a node restart or a bad config push
// (round 23's overlay, every pod in CrashLoopBackOff) leaves every replica
// crash-looping. Prometheus then scrapes every target with up == 0 and
// fencegate_ready goes stale on all of them (a failed scrape writes
// staleness markers). No worker can write anywhere.
//
// What happened: deploy/prometheus/alerts.yml is evaluated by promtool on
// exactly that (two replicas ready for 3 minutes, then both unscrapable
// for 10): the only alerts firing are FencegateReplicaDown, once per
// replica, at severity warning ("... the others' replicas serve", says
// docs/OPERATIONS.md). FencegateNoReplicaReady, the critical alert meant
// for "new connections reach none", reads `sum by (job) (fencegate_ready)
// == 0`, which has no sample when no replica exports anything, so it
// cannot fire in the worst case it exists for; it fires only while the
// replicas are up and answer 503. A total write outage pages nobody.
//
// What should happen: some alert of severity critical fires when no
// replica of the job is up, e.g. FencegateNoReplicaReady extended with
// `or sum by (job) (up{job="fencegate"}) == 0` (or an
// absent()/count-based FencegateAllReplicasDown).
//
// Severity: medium (a total outage of fenced writes is reported only as
// per-replica warnings; not a safety hole, an operability one).
func TestRedTeam27NoCriticalAlertWhenEveryReplicaIsDown(t *testing.T) {
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Fatalf("promtool: %v (make deps installs prometheus)", err)
	}
	alerts, err := filepath.Abs(filepath.Join("prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0)
	for name := range alertExprs(t) {
		names = append(names, name)
	}
	slices.Sort(names)

	// Every alert is expected to be silent: promtool then lists what does
	// fire, with its labels, in its failure report.
	var b strings.Builder
	b.WriteString("rule_files: [" + alerts + "]\nevaluation_interval: 1m\ntests:\n")
	b.WriteString("  - name: every replica down\n    interval: 1m\n    input_series:\n")
	for _, inst := range []string{"a:9090", "b:9090"} {
		b.WriteString("      - series: 'up{job=\"fencegate\",instance=\"" + inst + "\"}'\n")
		b.WriteString("        values: '1 1 1 0 0 0 0 0 0 0 0 0 0 0'\n")
		b.WriteString("      - series: 'fencegate_ready{job=\"fencegate\",instance=\"" + inst + "\"}'\n")
		b.WriteString("        values: '1 1 1 stale'\n")
	}
	b.WriteString("    alert_rule_test:\n")
	for _, at := range []string{"6m", "10m", "13m"} {
		for _, n := range names {
			b.WriteString("      - eval_time: " + at + "\n        alertname: " + n + "\n        exp_alerts: []\n")
		}
	}
	test := filepath.Join(t.TempDir(), "rt27_alldown_test.yml")
	if err := os.WriteFile(test, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("promtool", "test", "rules", test).CombinedOutput()
	report := string(out)
	if strings.Contains(report, "Error") || strings.Contains(report, "error:") {
		t.Fatalf("promtool test rules could not run the case:\n%s", report)
	}
	labels := regexp.MustCompile(`Labels:\{([^}]*)\}`).FindAllStringSubmatch(report, -1)
	var firing, critical []string
	for _, l := range labels {
		firing = append(firing, l[1])
		if strings.Contains(l[1], `severity="critical"`) {
			critical = append(critical, l[1])
		}
	}
	if len(critical) == 0 {
		t.Errorf("every replica down (up == 0 on all, fencegate_ready stale) for 10 minutes: no alert of severity critical fires;"+
			" firing: %q.\nFencegateNoReplicaReady (`sum by (job) (fencegate_ready) == 0`) has no sample when no replica is up,"+
			" so the one critical 'no replica serves' alert cannot fire in a total outage", firing)
	}
}
