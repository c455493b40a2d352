package deploy_test

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The parts of the Compose file format that compose.yaml uses; decoded
// strictly, so a misspelt key is an error.
type composeFile struct {
	Name              string                    `json:"name"`
	XFencegate        any                       `json:"x-fencegate"`
	XServeEnvironment any                       `json:"x-serve-environment"`
	XServeDependsOn   any                       `json:"x-serve-depends-on"`
	Services          map[string]composeService `json:"services"`
	Volumes           map[string]any            `json:"volumes"`
}

type composeService struct {
	Build *struct {
		Context    string `json:"context"`
		Dockerfile string `json:"dockerfile"`
	} `json:"build"`
	Image       string            `json:"image"`
	ReadOnly    bool              `json:"read_only"`
	User        string            `json:"user"`
	CapDrop     []string          `json:"cap_drop"`
	SecurityOpt []string          `json:"security_opt"`
	Restart     string            `json:"restart"`
	Environment map[string]string `json:"environment"`
	// A list of names, or a map of name to condition.
	DependsOn   any      `json:"depends_on"`
	Command     []string `json:"command"`
	Volumes     []string `json:"volumes"`
	Ports       []string `json:"ports"`
	Healthcheck *struct {
		Test     []string `json:"test"`
		Interval string   `json:"interval"`
		Retries  int      `json:"retries"`
	} `json:"healthcheck"`
}

func (s composeService) dependsOn() []string {
	switch d := s.DependsOn.(type) {
	case []any:
		var out []string
		for _, n := range d {
			out = append(out, n.(string))
		}
		return out
	case map[string]any:
		var out []string
		for n := range d {
			out = append(out, n)
		}
		return out
	}
	return nil
}

const composeDir = "compose"

// TestCompose checks deploy/compose: services and what they reference
// exist, fencegate's commands and environment use only flags it has, and
// Prometheus (checked by promtool) scrapes every replica's --metrics-addr.
func TestCompose(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(composeDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.UnmarshalStrict(raw, &cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for _, name := range []string{"etcd", "postgres", "redis", "migrate", "fencegate-1", "fencegate-2", "prometheus", "grafana"} {
		if _, ok := cf.Services[name]; !ok {
			t.Errorf("compose.yaml: no service %s", name)
		}
	}

	var replicas []string
	metricsPorts := map[string]string{}
	for name, s := range cf.Services {
		where := "service " + name
		if s.Image == "" {
			t.Errorf("%s: no image", where)
		}
		for _, d := range s.dependsOn() {
			if _, ok := cf.Services[d]; !ok {
				t.Errorf("%s: depends on %s, which is no service", where, d)
			}
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s: port %s is published beyond loopback; the stack runs without TLS or policy", where, p)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join(composeDir, src)); err != nil {
					t.Errorf("%s: mounts %s: %v", where, src, err)
				}
			} else if _, ok := cf.Volumes[src]; !ok {
				t.Errorf("%s: volume %s is not declared", where, src)
			}
		}
		if s.Build == nil {
			continue
		}
		// A fencegate service: the image this repository builds.
		if _, err := os.Stat(filepath.Join(composeDir, s.Build.Context, s.Build.Dockerfile)); err != nil || s.Build.Dockerfile != "deploy/"+dockerfile {
			t.Errorf("%s: build %+v: want the repository's root and deploy/%s (%v)", where, *s.Build, dockerfile, err)
		}
		if !s.ReadOnly || s.User == "" || s.User[0] == '0' || !slices.Contains(s.CapDrop, "ALL") {
			t.Errorf("%s: want read_only, a non-root user and cap_drop ALL, got %v %q %v", where, s.ReadOnly, s.User, s.CapDrop)
		}
		if len(s.Command) == 0 {
			t.Errorf("%s: no command", where)
			continue
		}
		flags := commandFlags(t, s.Command[0])
		args := commandArgs(t, where, s.Command[0], s.Command, flags)
		var env []string
		for k := range s.Environment {
			env = append(env, k)
		}
		checkEnv(t, where+" environment", env, flags)
		if s.Command[0] == "serve" {
			replicas = append(replicas, name)
			if args["metrics-addr"] == "" {
				t.Errorf("%s: no --metrics-addr for Prometheus", where)
			}
			metricsPorts[name] = portOf(t, where, args["metrics-addr"])
		}
	}
	if len(replicas) < 2 {
		t.Errorf("compose.yaml: got fencegate replicas %v, want two", replicas)
	}

	// Prometheus's configuration, laid out as its service mounts it, must
	// pass promtool and scrape each replica.
	prom := cf.Services["prometheus"]
	etc := t.TempDir()
	var config string
	for _, v := range prom.Volumes {
		parts := strings.Split(v, ":")
		if !strings.HasPrefix(parts[0], ".") {
			continue
		}
		rel, ok := strings.CutPrefix(parts[1], "/etc/prometheus/")
		if !ok {
			t.Errorf("prometheus: mount %s outside /etc/prometheus", v)
			continue
		}
		data, err := os.ReadFile(filepath.Join(composeDir, parts[0]))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(etc, rel), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if rel == "prometheus.yml" {
			config = string(data)
		}
	}
	if out, err := exec.Command("promtool", "check", "config", filepath.Join(etc, "prometheus.yml")).CombinedOutput(); err != nil {
		t.Errorf("promtool check config of compose's prometheus.yml: %v\n%s", err, out)
	}
	for _, r := range replicas {
		if target := r + ":" + metricsPorts[r]; !strings.Contains(config, target) {
			t.Errorf("prometheus.yml: no scrape target %s (replica %s's --metrics-addr)", target, r)
		}
	}

	// Grafana finds the dashboard where its provider looks.
	var provider struct {
		APIVersion int `json:"apiVersion"`
		Providers  []struct {
			Name            string `json:"name"`
			Type            string `json:"type"`
			DisableDeletion bool   `json:"disableDeletion"`
			Options         struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	data, err := os.ReadFile(filepath.Join(composeDir, "grafana", "dashboards.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &provider); err != nil || len(provider.Providers) != 1 {
		t.Fatalf("grafana/dashboards.yaml: %v (%d providers, want 1)", err, len(provider.Providers))
	}
	found := false
	for _, v := range cf.Services["grafana"].Volumes {
		parts := strings.Split(v, ":")
		if strings.HasSuffix(parts[0], "grafana/fencegate.json") && path.Dir(parts[1]) == provider.Providers[0].Options.Path {
			found = true
		}
	}
	if !found {
		t.Errorf("grafana: the dashboard is not mounted under the provider's path %s", provider.Providers[0].Options.Path)
	}
}
