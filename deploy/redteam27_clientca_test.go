package deploy_test

import (
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestRedTeam27ExampleTrustsClusterIssuerForIdentity
//
// Attack/Problem: the example overlay (deploy/kubernetes/example, "an
// overlay to copy") verifies workers' client certificates with
// --trusted-ca-file=/etc/fencegate/tls/ca.crt, the ca.crt that
// cert-manager writes into Secret fencegate-tls for the Certificate
// `fencegate`, issued by the ClusterIssuer internal-ca. That CA is then the
// whole of fencegate's authentication: the principal is the certificate's
// first URI SAN (else dns:<first DNS SAN>), and the example policy grants
// sql.write/redis.write on billing* to
// "spiffe://cluster.local/ns/billing/sa/*" and fence.read on every fence
// to "dns:ops.fencegate.svc". A ClusterIssuer signs Certificates requested
// from any namespace, a CA issuer puts in whatever uris/dnsNames the
// request asks for, cert-manager's built-in approver approves every
// CertificateRequest, and cert-manager's aggregated ClusterRoles give
// every namespace `edit`/`admin` the right to create Certificates. So a
// user who may create a Certificate in any namespace (namespace "dev",
// say) asks internal-ca for uris: [spiffe://cluster.local/ns/billing/sa/x]
// and writes every billing fence through fencegate with the current
// (public) token; the NetworkPolicy lets in any pod labelled
// fencegate.io/client, in any namespace. The SPIFFE-looking name suggests
// the namespace is attested; nothing here attests it.
//
// What happened: the rendered overlay trusts, for client identity, the CA
// of a cluster-scoped issuer that is also the one the server certificate
// comes from; neither the overlay nor docs/OPERATIONS.md ("the CA that
// workers' client certificates are verified with") nor docs/SECURITY.md
// says that identities must then be restricted (approver-policy, a
// dedicated CA whose issuer only trusted namespaces can use, or SPIFFE
// workload identities from csi-driver-spiffe).
//
// What should happen: the example verifies client certificates with a CA
// whose issuance is bound to the identity it names: a namespaced Issuer /
// dedicated worker CA (not the ClusterIssuer the server cert uses), or
// cert-manager approver-policy constraining URI SANs per namespace, and
// says so next to --trusted-ca-file.
//
// Severity: high for a deployment copied from the example (any namespace
// editor can impersonate any worker principal and write its fences; the
// fencing token is no secret, so the policy is the only barrier).
func TestRedTeam27ExampleTrustsClusterIssuerForIdentity(t *testing.T) {
	dir := filepath.Join(kubeDir, "example")
	objs := decodeManifests(t, "kustomize "+dir, kustomize(t, dir))
	dep := only[*appsv1.Deployment](t, objs, "Deployment")
	c := dep.Spec.Template.Spec.Containers[0]
	var caFile string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--trusted-ca-file="); ok {
			caFile = v
		}
	}
	if caFile == "" {
		t.Fatal("the example does not verify client certificates (no --trusted-ca-file)")
	}
	var volume string
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(caFile, strings.TrimSuffix(m.MountPath, "/")+"/") {
			volume = m.Name
		}
	}
	var secret string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == volume && v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}
	if secret == "" {
		t.Fatalf("--trusted-ca-file=%s: no Secret volume mounted there", caFile)
	}
	var issuer *certificate
	for _, o := range objs.byKind["Certificate"] {
		if c := o.(*certificate); c.Spec.SecretName == secret {
			issuer = c
		}
	}
	if issuer == nil {
		t.Fatalf("Secret %s is not written by a Certificate of the overlay", secret)
	}

	// The principals the example policy trusts by a name in the
	// certificate (URI or DNS SAN), which the requester chooses.
	var principals []string
	for _, o := range objs.byKind["ConfigMap"] {
		cm := o.(*corev1.ConfigMap)
		for _, text := range cm.Data {
			var p struct {
				Rules []struct {
					Principals []string `json:"principals"`
					Actions    []string `json:"actions"`
				} `json:"rules"`
			}
			if yaml.Unmarshal([]byte(text), &p) != nil {
				continue
			}
			for _, r := range p.Rules {
				for _, pr := range r.Principals {
					if strings.Contains(pr, "://") || strings.HasPrefix(pr, "dns:") {
						principals = append(principals, pr+" "+strings.Join(r.Actions, ","))
					}
				}
			}
		}
	}

	if issuer.Spec.IssuerRef.Kind == "ClusterIssuer" {
		t.Errorf("the example verifies client identities (--trusted-ca-file=%s, key ca.crt of Secret %s) with the CA of ClusterIssuer %q,"+
			" which signs Certificates requested from any namespace with any URI/DNS SAN (auto-approved):"+
			" anyone who may create a cert-manager Certificate anywhere in the cluster becomes any of the policy's principals %q",
			caFile, secret, issuer.Spec.IssuerRef.Name, principals)
	}
}
