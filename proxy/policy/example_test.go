package policy_test

import (
	"fmt"

	"github.com/fencegate/fencegate/proxy/policy"
)

func ExamplePolicy_Decide() {
	p, err := policy.Parse([]byte(`
rules:
  - name: billing-writers
    principals: ["spiffe://prod.example/billing/*", "token:billing-cron"]
    fences: ["billing", "billing-*"]
    actions: [sql.write, redis.write, fence.read]
    postgres_role: billing_writer
  - name: freeze-payments
    effect: deny
    principals: ["*"]
    fences: ["payments-*"]
    actions: [sql.write]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%+v\n", p.Decide("spiffe://prod.example/billing/leader", "billing-eu", policy.ActionSQLWrite))
	fmt.Printf("%+v\n", p.Decide("token:billing-cron", "payments-eu", policy.ActionSQLWrite))
	fmt.Printf("%+v\n", p.Decide("", "billing", policy.ActionFenceRead))
	// Output:
	// {Allowed:true Rule:billing-writers Role:billing_writer}
	// {Allowed:false Rule:freeze-payments Role:}
	// {Allowed:false Rule: Role:}
}
