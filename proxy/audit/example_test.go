package audit_test

import (
	"fmt"

	"github.com/fencegate/fencegate/proxy/audit"
)

func ExampleFingerprint() {
	// The statements of a write, never the values bound to them.
	fmt.Println(audit.Fingerprint("UPDATE accounts SET balance = $1 WHERE id = $2"))
	fmt.Println(audit.Fingerprint("ab", "c") == audit.Fingerprint("a", "bc"))
	// Output:
	// 49cfdfbed4fb89dda9cad47523e0ab03adab6036f13af7c1b48baa21b1c4f856
	// false
}
