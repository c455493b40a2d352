package policy

import (
	"testing"
)

// examplePolicy is API.md's example, with one more allow rule after the
// first to show that the first matching allow decides the role.
const examplePolicy = `
rules:
  - name: billing-writers
    principals: ["spiffe://prod.example/billing/*", "token:billing-cron"]
    fences: ["billing", "billing-*"]
    actions: [sql.write, redis.write, fence.read]
    postgres_role: billing_writer
  - name: billing-writers-again
    principals: ["token:billing-cron"]
    fences: ["billing"]
    actions: [sql.write]
    postgres_role: other_role
  - name: ops-read
    principals: ["cn:ops-*"]
    fences: ["*"]
    actions: [fence.read]
  - name: anyone-reads-public
    principals: ["*"]
    fences: ["public-*"]
    actions: [fence.read]
  - name: payments
    principals: ["token:payments"]
    fences: ["payments-*"]
    actions: [sql.write, fence.admin]
    postgres_role: payments_writer
  - name: freeze-payments
    effect: deny
    principals: ["*"]
    fences: ["payments-eu"]
    actions: [sql.write]
`

func mustParse(tb testing.TB, doc string) *Policy {
	tb.Helper()
	p, err := Parse([]byte(doc))
	if err != nil {
		tb.Fatalf("Parse: %v", err)
	}
	return p
}

func TestDecide(t *testing.T) {
	p := mustParse(t, examplePolicy)
	allow := func(rule, role string) Decision { return Decision{Allowed: true, Rule: rule, Role: role} }
	tests := []struct {
		name      string
		principal string
		fence     string
		action    Action
		want      Decision
	}{
		{"prefix principal, exact fence", "spiffe://prod.example/billing/leader", "billing", ActionSQLWrite, allow("billing-writers", "billing_writer")},
		{"prefix principal, prefix fence", "spiffe://prod.example/billing/leader", "billing-eu", ActionRedisWrite, allow("billing-writers", "")},
		{"exact principal", "token:billing-cron", "billing-x", ActionFenceRead, allow("billing-writers", "")},
		{"first allow decides the role", "token:billing-cron", "billing", ActionSQLWrite, allow("billing-writers", "billing_writer")},
		{"prefix is not a substring", "spiffe://prod.example/billingx", "billing", ActionSQLWrite, Decision{}},
		{"exact is not a prefix", "token:billing-cron2", "billing", ActionSQLWrite, Decision{}},
		{"exact fence is not a prefix", "token:billing-cron", "billingx", ActionSQLWrite, Decision{}},
		{"action not granted", "token:billing-cron", "billing", ActionFenceAdmin, Decision{}},
		{"unknown action", "token:billing-cron", "billing", Action("sql.read"), Decision{}},
		{"empty action", "token:billing-cron", "billing", "", Decision{}},
		{"writer of a cannot write b", "token:billing-cron", "payments-us", ActionSQLWrite, Decision{}},
		{"star fence", "cn:ops-alice", "anything", ActionFenceRead, allow("ops-read", "")},
		{"star fence matches the empty fence", "cn:ops-alice", "", ActionFenceRead, allow("ops-read", "")},
		{"star principal matches anonymous", "", "public-docs", ActionFenceRead, allow("anyone-reads-public", "")},
		{"star principal matches anyone", "token:x", "public-docs", ActionFenceRead, allow("anyone-reads-public", "")},
		{"anonymous matches no prefix", "", "billing", ActionFenceRead, Decision{}},
		{"default deny", "token:nobody", "nothing", ActionSQLWrite, Decision{}},
		{"allowed before the deny", "token:payments", "payments-us", ActionSQLWrite, allow("payments", "payments_writer")},
		{"deny wins over an earlier allow", "token:payments", "payments-eu", ActionSQLWrite, Decision{Rule: "freeze-payments"}},
		{"deny is per action", "token:payments", "payments-eu", ActionFenceAdmin, allow("payments", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Decide(tt.principal, tt.fence, tt.action); got != tt.want {
				t.Errorf("Decide(%q, %q, %q) = %+v, want %+v", tt.principal, tt.fence, tt.action, got, tt.want)
			}
		})
	}
}

func TestEmptyPolicyDeniesEverything(t *testing.T) {
	p := mustParse(t, "rules: []\n")
	for _, a := range []Action{ActionSQLWrite, ActionRedisWrite, ActionFenceRead, ActionFenceAdmin} {
		if got := p.Decide("", "", a); got != (Decision{}) {
			t.Errorf("Decide(%q) = %+v, want a default deny", a, got)
		}
	}
	if got := p.Rules(); got != 0 {
		t.Errorf("Rules() = %d, want 0", got)
	}
}

func TestRoles(t *testing.T) {
	p := mustParse(t, `
rules:
  - {name: a, principals: [w], fences: [f], actions: [sql.write], postgres_role: zeta}
  - {name: b, principals: [w], fences: [f], actions: [sql.write], postgres_role: alpha}
  - {name: c, principals: [z], fences: [f], actions: [sql.write], postgres_role: zeta}
  - {name: d, principals: [z], fences: [f], actions: [fence.read]}
`)
	got := p.Roles()
	want := []string{"alpha", "zeta"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Roles() = %q, want %q", got, want)
	}
	got[0] = "mutated"
	if p.Roles()[0] != "alpha" {
		t.Errorf("Roles() shares its slice with the policy")
	}
	if got := p.Rules(); got != 4 {
		t.Errorf("Rules() = %d, want 4", got)
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	p := mustParse(t, examplePolicy)
	var d Decision
	allocs := testing.AllocsPerRun(1000, func() {
		d = p.Decide("token:payments", "payments-us", ActionSQLWrite)
		d = p.Decide("token:payments", "payments-eu", ActionSQLWrite)
		d = p.Decide("nobody", "nothing", ActionFenceRead)
	})
	if allocs != 0 {
		t.Errorf("Decide: got %v allocations, want 0", allocs)
	}
	_ = d
}

func BenchmarkDecide(b *testing.B) {
	p := mustParse(b, examplePolicy)
	b.ReportAllocs()
	for b.Loop() {
		if !p.Decide("token:payments", "payments-us", ActionSQLWrite).Allowed {
			b.Fatal("denied")
		}
	}
}
