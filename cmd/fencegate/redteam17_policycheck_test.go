package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/auth/authtest"
)

// TestRedTeam17DenyRuleLostToTransientRoleCheck: every policy loaded while
// serving goes through serve's Check, CheckRoles, which asks PostgreSQL
// about the policy's roles (a secure deployment has postgres_role on
// every sql.write rule). The operator cuts a compromised worker off with
// an effect: deny rule ("in force within a second", SECURITY.md) while
// PostgreSQL is briefly unavailable (a failover, a stall): the check
// fails, so the new policy is refused and the old one, without the deny,
// stays in force. Store.poll then remembers the file's hash as tried
// and never loads it again while its content stays the same, so the deny
// rule stays out for good once the database is back: the worker keeps
// writing, with nothing but fencegate_policy_valid 0 and one log line to
// show it. A deny rule can only take rights away, yet it is lost to a
// failure that has nothing to do with it. Expected: a file refused for a
// reason outside it (the database not answering) is tried again, so the
// deny rule is in force within seconds of the database answering.
func TestRedTeam17DenyRuleLostToTransientRoleCheck(t *testing.T) {
	e := newSecureEnv(t)
	ctx := t.Context()
	alice := e.ca.Issue(t, "alice", authtest.Leaf{URIs: []string{"spiffe://test/a/alice"}, Client: true})
	policyFile := e.writeFile(t, "policy.yaml", securePolicy)
	g := e.serveGateway(t, "--cert-file="+e.srv.CertFile, "--key-file="+e.srv.KeyFile,
		"--trusted-ca-file="+e.ca.File, "--policy-file="+policyFile)
	ta := e.lead(t, "a", "alice")
	ac := e.client(t, g, alice)
	if err := execSQL(ctx, ac, "a", ta, "INSERT INTO a_t VALUES ('before')"); err != nil {
		t.Fatalf("control: alice writes a: %v", err)
	}

	// PostgreSQL stalls; meanwhile the operator installs the deny rule.
	pg := rt2Tree(e.pg.PID())
	rt2Signal(t, pg, syscall.SIGSTOP)
	resumed := false
	resume := func() {
		if !resumed {
			rt2Signal(t, rt2Tree(e.pg.PID()), syscall.SIGCONT)
			resumed = true
		}
	}
	defer resume()
	e.writeFile(t, "policy.yaml", securePolicy+`  - name: cut-off-alice
    effect: deny
    principals: ["spiffe://test/a/alice"]
    fences: ["*"]
    actions: [sql.write, redis.write, fence.admin]
`)
	waitFor(t, "the reload to fail while PostgreSQL stalls", func() bool {
		return strings.Contains(g.stderr.String(), "policy: reload failed")
	})
	resume()

	// The database answers again; give the poll several looks.
	if _, err := e.admin.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("control: PostgreSQL after SIGCONT: %v", err)
	}
	time.Sleep(4 * time.Second)
	err := execSQL(ctx, ac, "a", ta, "INSERT INTO a_t VALUES ('after the deny rule')")
	if reason, _ := reasonOf(err); reason != "NOT_AUTHORIZED" {
		t.Errorf("HOLE: 4 s after PostgreSQL came back, the deny rule for spiffe://test/a/alice in --policy-file is not in force: her write got %v (a_t holds %d rows), want NOT_AUTHORIZED; log: %s",
			err, e.count(t, "a_t"), grepLines(g.stderr.String(), "reload failed"))
	}
}
