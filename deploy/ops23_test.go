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
	bin := fencegateBinary(t)
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
