package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/fencegate/fencegate/proxy/policy"
)

// The kinds of objects fencegate's manifests hold beyond k8s.io/api's:
// checked by structure, each field known, no CRD schema at hand.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretName  string   `json:"secretName"`
		IsCA        bool     `json:"isCA"`
		CommonName  string   `json:"commonName"`
		Duration    string   `json:"duration"`
		RenewBefore string   `json:"renewBefore"`
		DNSNames    []string `json:"dnsNames"`
		URIs        []string `json:"uris"`
		Usages      []string `json:"usages"`
		PrivateKey  struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		IssuerRef struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

// issuer is a cert-manager Issuer, as the example makes them: self-signed,
// or a CA whose key and certificate are in a Secret.
type issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct{} `json:"selfSigned"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca"`
	} `json:"spec"`
}

type kustomization struct {
	metav1.TypeMeta `json:",inline"`
	Namespace       string   `json:"namespace"`
	Resources       []string `json:"resources"`
	Labels          []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
		IncludeTemplates bool              `json:"includeTemplates"`
	} `json:"labels"`
	Images []struct {
		Name, NewName, NewTag string
	} `json:"images"`
	GeneratorOptions struct {
		DisableNameSuffixHash bool `json:"disableNameSuffixHash"`
	} `json:"generatorOptions"`
	ConfigMapGenerator []generator `json:"configMapGenerator"`
	SecretGenerator    []generator `json:"secretGenerator"`
	Patches            []struct {
		Target struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"target"`
		Patch string `json:"patch"`
	} `json:"patches"`
}

type generator struct {
	Name     string   `json:"name"`
	Files    []string `json:"files"`
	Literals []string `json:"literals"`
}

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// objects is one rendering: every object by kind and name.
type objects struct {
	where   string
	byKind  map[string][]any
	decoded int
}

func (o *objects) add(v any, kind string) {
	o.byKind[kind] = append(o.byKind[kind], v)
	o.decoded++
}

// decodeManifests decodes every document of data strictly (unknown or
// duplicate fields are errors) into its kind's type.
func decodeManifests(t *testing.T, where string, data []byte) *objects {
	t.Helper()
	objs := &objects{where: where, byKind: map[string][]any{}}
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Errorf("%s document %d: %v", where, i, err)
			continue
		}
		var v any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			v = &appsv1.Deployment{}
		case "v1 Service":
			v = &corev1.Service{}
		case "v1 ServiceAccount":
			v = &corev1.ServiceAccount{}
		case "v1 Namespace":
			v = &corev1.Namespace{}
		case "v1 ConfigMap":
			v = &corev1.ConfigMap{}
		case "v1 Secret":
			v = &corev1.Secret{}
		case "policy/v1 PodDisruptionBudget":
			v = &policyv1.PodDisruptionBudget{}
		case "networking.k8s.io/v1 NetworkPolicy":
			v = &networkingv1.NetworkPolicy{}
		case "monitoring.coreos.com/v1 ServiceMonitor":
			v = &serviceMonitor{}
		case "cert-manager.io/v1 Certificate":
			v = &certificate{}
		case "cert-manager.io/v1 Issuer":
			v = &issuer{}
		case "kustomize.config.k8s.io/v1beta1 Kustomization":
			v = &kustomization{}
		default:
			t.Errorf("%s document %d: %s %s: not a kind the test knows", where, i, tm.APIVersion, tm.Kind)
			continue
		}
		if err := yaml.UnmarshalStrict(doc, v); err != nil {
			t.Errorf("%s document %d (%s): %v", where, i, tm.Kind, err)
			continue
		}
		objs.add(v, tm.Kind)
	}
	return objs
}

func only[T any](t *testing.T, o *objects, kind string) T {
	t.Helper()
	if len(o.byKind[kind]) != 1 {
		t.Fatalf("%s: got %d %s objects, want 1", o.where, len(o.byKind[kind]), kind)
	}
	return o.byKind[kind][0].(T)
}

// kustomize renders dir with kustomize: FENCEGATE_KUSTOMIZE (make deps
// builds it into bin/tools) or `kubectl kustomize`.
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	var cmd *exec.Cmd
	if k := os.Getenv("FENCEGATE_KUSTOMIZE"); k != "" {
		cmd = exec.Command(k, "build", dir)
	} else if k, err := exec.LookPath("kubectl"); err == nil {
		cmd = exec.Command(k, "kustomize", dir)
	} else {
		t.Fatalf("no kustomize: set FENCEGATE_KUSTOMIZE or install kubectl (make deps builds bin/tools/kustomize)")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	return out
}

const kubeDir = "kubernetes"

// TestKubernetesManifests decodes every manifest file strictly, renders
// the base and the example overlay with kustomize, decodes what they
// render strictly too, and checks what must agree: flags against
// `fencegate serve --help`, ports, probes, selectors, mounted files.
func TestKubernetesManifests(t *testing.T) {
	flags := serveFlags(t)
	files, err := filepath.Glob(filepath.Join(kubeDir, "*", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests under %s: %v", kubeDir, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(f) == "policy.yaml" {
			if _, err := policy.Parse(data); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			continue
		}
		objs := decodeManifests(t, f, data)
		if objs.decoded == 0 {
			t.Errorf("%s: no object decoded", f)
		}
		for _, v := range objs.byKind["Kustomization"] {
			checkKustomization(t, f, v.(*kustomization), flags)
		}
	}
	for _, dir := range []string{"base", "example"} {
		t.Run(dir, func(t *testing.T) {
			p := filepath.Join(kubeDir, dir)
			checkRendering(t, decodeManifests(t, "kustomize "+p, kustomize(t, p)), flags, dir == "example")
		})
	}
}

// checkKustomization checks the flags an overlay's patches and generators
// pass.
func checkKustomization(t *testing.T, file string, k *kustomization, flags map[string]bool) {
	t.Helper()
	for _, g := range append(k.ConfigMapGenerator, k.SecretGenerator...) {
		var names []string
		for _, l := range g.Literals {
			name, _, _ := strings.Cut(l, "=")
			names = append(names, name)
		}
		checkEnv(t, file+" generator "+g.Name, names, flags)
		for _, f := range g.Files {
			if _, err := os.Stat(filepath.Join(filepath.Dir(file), f)); err != nil {
				t.Errorf("%s generator %s: %v", file, g.Name, err)
			}
		}
	}
	for _, p := range k.Patches {
		var ops []jsonPatchOp
		if err := yaml.UnmarshalStrict([]byte(p.Patch), &ops); err != nil {
			t.Errorf("%s: patch of %s %s: %v", file, p.Target.Kind, p.Target.Name, err)
		}
	}
}

func matches(sel map[string]string, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

func checkRendering(t *testing.T, o *objects, flags map[string]bool, complete bool) {
	t.Helper()
	dep := only[*appsv1.Deployment](t, o, "Deployment")
	svc := only[*corev1.Service](t, o, "Service")
	pdb := only[*policyv1.PodDisruptionBudget](t, o, "PodDisruptionBudget")
	np := only[*networkingv1.NetworkPolicy](t, o, "NetworkPolicy")
	sm := only[*serviceMonitor](t, o, "ServiceMonitor")
	pod := dep.Spec.Template
	podLabels := pod.Labels

	// Replicas and how they roll.
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("Deployment replicas: got %v, want 3", dep.Spec.Replicas)
	}
	if ru := dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("Deployment rolling update: got %+v, want maxUnavailable 0 (one replica at a time, the new one ready first)", ru)
	}
	if !matches(dep.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("Deployment selector %v does not match its pods' labels %v", dep.Spec.Selector.MatchLabels, podLabels)
	}
	for name, sel := range map[string]map[string]string{
		"Service selector": svc.Spec.Selector, "PodDisruptionBudget selector": pdb.Spec.Selector.MatchLabels,
		"NetworkPolicy podSelector": np.Spec.PodSelector.MatchLabels,
	} {
		if !matches(sel, podLabels) {
			t.Errorf("%s %v does not match the pods' labels %v", name, sel, podLabels)
		}
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget: got maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}
	if len(pod.Spec.TopologySpreadConstraints) == 0 {
		t.Errorf("Deployment: no topologySpreadConstraints, want replicas spread over nodes")
	}
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.LabelSelector == nil || !matches(c.LabelSelector.MatchLabels, podLabels) {
			t.Errorf("topology spread over %s: selector %v does not match the pods", c.TopologyKey, c.LabelSelector)
		}
	}

	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("got %d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	args := serveArgs(t, "container args", c.Args, flags)

	// The configuration from ConfigMaps and Secrets by environment.
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for _, ef := range c.EnvFrom {
		var keys map[string]string
		var found bool
		switch {
		case ef.ConfigMapRef != nil:
			keys, found = configMapData(o, ef.ConfigMapRef.Name)
		case ef.SecretRef != nil:
			keys, found = secretData(o, ef.SecretRef.Name)
		}
		if !found && complete {
			t.Errorf("envFrom %+v: no such ConfigMap or Secret in the rendering", ef)
		}
		for k, v := range keys {
			env[k] = v
		}
	}
	checkEnv(t, "container environment", slices.Collect(mapsKeys(env)), flags)
	for k, v := range env {
		if f, ok := envFlag(k); ok {
			if _, dup := args[f]; dup {
				t.Errorf("--%s is both an argument and %s", f, k)
			}
			args[f] = v
		}
	}

	// Ports: every listener has its container port, named.
	portByName := map[string]int32{}
	portNames := map[int32]string{}
	for _, p := range c.Ports {
		portByName[p.Name] = p.ContainerPort
		portNames[p.ContainerPort] = p.Name
	}
	for _, f := range listenFlags {
		addr, ok := args[f]
		if !ok || addr == "" {
			continue
		}
		port := portOf(t, "--"+f, addr)
		n, _ := strconv.Atoi(port)
		if portNames[int32(n)] == "" {
			t.Errorf("--%s=%s: no container port %s", f, addr, port)
		}
	}
	resolve := func(p intstr.IntOrString) int32 {
		if p.Type == intstr.String {
			return portByName[p.StrVal]
		}
		return p.IntVal
	}

	// Probes: on --metrics-addr's port, which needs no client
	// certificate (the kubelet has none).
	metricsPort, _ := strconv.Atoi(portOf(t, "--metrics-addr", args["metrics-addr"]))
	if args["metrics-addr"] == "" {
		t.Errorf("no --metrics-addr: probes and Prometheus would need a client certificate for the HTTP port")
	}
	for name, tc := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{"readiness": {c.ReadinessProbe, "/readyz"}, "liveness": {c.LivenessProbe, "/healthz"}, "startup": {c.StartupProbe, "/healthz"}} {
		switch {
		case tc.probe == nil || tc.probe.HTTPGet == nil:
			t.Errorf("%s probe: got %+v, want an HTTP GET of %s", name, tc.probe, tc.path)
		case tc.probe.HTTPGet.Path != tc.path:
			t.Errorf("%s probe path: got %s, want %s", name, tc.probe.HTTPGet.Path, tc.path)
		case resolve(tc.probe.HTTPGet.Port) != int32(metricsPort) || tc.probe.HTTPGet.Scheme == corev1.URISchemeHTTPS:
			t.Errorf("%s probe: got %s port %s, want plain HTTP to --metrics-addr's port %d", name, tc.probe.HTTPGet.Scheme, tc.probe.HTTPGet.Port.String(), metricsPort)
		}
	}

	// Security.
	psc, csc := pod.Spec.SecurityContext, c.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	nonRoot := (csc.RunAsNonRoot != nil && *csc.RunAsNonRoot) || (psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
	switch {
	case !nonRoot:
		t.Errorf("securityContext: want runAsNonRoot")
	case csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem:
		t.Errorf("securityContext: want readOnlyRootFilesystem")
	case csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation:
		t.Errorf("securityContext: want allowPrivilegeEscalation: false")
	case csc.Privileged != nil && *csc.Privileged:
		t.Errorf("securityContext: privileged")
	case csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL"):
		t.Errorf("securityContext: want capabilities drop ALL")
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken: want false, fencegate does not use the Kubernetes API")
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("resources: no %s request", r)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Errorf("resources: no memory limit")
	}

	// Files: certificates and policy from mounted Secrets and ConfigMaps,
	// which the kubelet updates in place (not with subPath), holding the
	// key the flag names.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, f := range []string{"cert-file", "key-file", "trusted-ca-file", "policy-file", "etcd-cert", "etcd-key", "etcd-cacert"} {
		file, ok := args[f]
		if !ok {
			continue
		}
		var mount *corev1.VolumeMount
		for i, m := range c.VolumeMounts {
			if path.Dir(file) == path.Clean(m.MountPath) {
				mount = &c.VolumeMounts[i]
			}
		}
		if mount == nil {
			t.Errorf("--%s=%s: no volume mounted at %s", f, file, path.Dir(file))
			continue
		}
		if mount.SubPath != "" {
			t.Errorf("--%s: mounted with subPath, which the kubelet never updates: a rotated file would not be seen", f)
		}
		v := vols[mount.Name]
		key := path.Base(file)
		switch {
		case v.Secret != nil:
			if keys, found := secretKeys(o, v.Secret.SecretName); complete && !keys[key] {
				t.Errorf("--%s=%s: Secret %s (found: %v) has no key %s", f, file, v.Secret.SecretName, found, key)
			}
		case v.ConfigMap != nil:
			data, found := configMapData(o, v.ConfigMap.Name)
			if complete && data[key] == "" {
				t.Errorf("--%s=%s: ConfigMap %s (found: %v) has no key %s", f, file, v.ConfigMap.Name, found, key)
			}
		default:
			t.Errorf("--%s: volume %s is neither a Secret nor a ConfigMap", f, mount.Name)
		}
	}

	// Service: each port reaches a named container port; every listener
	// but metrics-only ones is reachable.
	svcPorts := map[string]corev1.ServicePort{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = p
		if resolve(p.TargetPort) == 0 {
			t.Errorf("Service port %s: targetPort %s is no container port", p.Name, p.TargetPort.String())
		}
	}
	for _, p := range c.Ports {
		found := false
		for _, sp := range svc.Spec.Ports {
			found = found || resolve(sp.TargetPort) == p.ContainerPort
		}
		if !found {
			t.Errorf("container port %s (%d): not in the Service", p.Name, p.ContainerPort)
		}
	}

	// NetworkPolicy: workers reach the API ports, Prometheus the metrics
	// port, no rule admits fencegate's own pods or anyone else.
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("NetworkPolicy: policyTypes %v, want Ingress", np.Spec.PolicyTypes)
	}
	admitted := map[string]string{} // container port name → who
	for i, rule := range np.Spec.Ingress {
		who := ""
		for _, peer := range rule.From {
			switch {
			case peer.IPBlock != nil:
				t.Errorf("NetworkPolicy rule %d: an ipBlock admits anyone in it", i)
			case peer.PodSelector == nil || len(peer.PodSelector.MatchLabels) == 0:
				t.Errorf("NetworkPolicy rule %d: a peer without a pod selector admits every pod", i)
			case matches(peer.PodSelector.MatchLabels, podLabels):
				t.Errorf("NetworkPolicy rule %d: peer %v selects fencegate's own pods, not its clients", i, peer.PodSelector.MatchLabels)
			case peer.PodSelector.MatchLabels["app.kubernetes.io/name"] == "prometheus":
				who = "prometheus"
			case peer.PodSelector.MatchLabels["fencegate.io/client"] == "true":
				who = "workers"
			default:
				t.Errorf("NetworkPolicy rule %d: peer %v is neither workers nor Prometheus", i, peer.PodSelector.MatchLabels)
			}
		}
		if len(rule.From) == 0 {
			t.Errorf("NetworkPolicy rule %d: no from, which admits anyone", i)
		}
		for _, p := range rule.Ports {
			if p.Port == nil || resolve(*p.Port) == 0 {
				t.Errorf("NetworkPolicy rule %d: port %v is no container port", i, p.Port)
				continue
			}
			admitted[portNames[resolve(*p.Port)]] = who
		}
	}
	for _, p := range c.Ports {
		want := "workers"
		if p.ContainerPort == int32(metricsPort) {
			want = "prometheus"
		}
		if admitted[p.Name] != want {
			t.Errorf("NetworkPolicy: port %s admits %q, want %s only", p.Name, admitted[p.Name], want)
		}
	}

	// ServiceMonitor: scrapes the Service's metrics port.
	if !matches(sm.Spec.Selector.MatchLabels, svc.Labels) {
		t.Errorf("ServiceMonitor selector %v does not match the Service's labels %v", sm.Spec.Selector.MatchLabels, svc.Labels)
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor: got %d endpoints, want 1", len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	if sp, ok := svcPorts[ep.Port]; !ok || resolve(sp.TargetPort) != int32(metricsPort) || ep.Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoint: got port %q path %q, want the Service port of --metrics-addr, /metrics", ep.Port, ep.Path)
	}

	// The example is complete: its certificate Secret comes from a
	// Certificate.
	if complete {
		for _, v := range vols {
			if v.Secret != nil {
				if _, found := secretKeys(o, v.Secret.SecretName); !found {
					t.Errorf("volume %s: nothing in the rendering makes Secret %s", v.Name, v.Secret.SecretName)
				}
			}
		}
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func configMapData(o *objects, name string) (map[string]string, bool) {
	for _, v := range o.byKind["ConfigMap"] {
		if cm := v.(*corev1.ConfigMap); cm.Name == name {
			return cm.Data, true
		}
	}
	return nil, false
}

func secretData(o *objects, name string) (map[string]string, bool) {
	for _, v := range o.byKind["Secret"] {
		if s := v.(*corev1.Secret); s.Name == name {
			out := map[string]string{}
			for k, b := range s.Data {
				out[k] = string(b)
			}
			for k, s := range s.StringData {
				out[k] = s
			}
			return out, true
		}
	}
	return nil, false
}

// secretKeys is the keys Secret name has in the rendering: its own, or
// those cert-manager writes for a Certificate.
func secretKeys(o *objects, name string) (map[string]bool, bool) {
	if data, ok := secretData(o, name); ok {
		keys := map[string]bool{}
		for k := range data {
			keys[k] = true
		}
		return keys, true
	}
	for _, v := range o.byKind["Certificate"] {
		if c := v.(*certificate); c.Spec.SecretName == name {
			return map[string]bool{"tls.crt": true, "tls.key": true, "ca.crt": true}, true
		}
	}
	return nil, false
}
