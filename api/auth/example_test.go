package auth_test

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/url"

	"github.com/fencegate/fencegate/api/auth"
)

func ExamplePrincipalOf() {
	spiffe, _ := url.Parse("spiffe://prod.example/billing/leader")
	for _, c := range []*x509.Certificate{
		{URIs: []*url.URL{spiffe}, DNSNames: []string{"billing.example"}},
		{DNSNames: []string{"billing.example"}, Subject: pkix.Name{CommonName: "billing"}},
		{Subject: pkix.Name{CommonName: "ops-alice"}},
	} {
		fmt.Println(auth.PrincipalOf(c))
	}
	// Output:
	// spiffe://prod.example/billing/leader
	// dns:billing.example
	// cn:ops-alice
}
