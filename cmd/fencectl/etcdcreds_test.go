package main

import (
	"strings"
	"testing"
)

// TestEtcdEndpointWithCredentials: an endpoint with a user name and
// password is refused (etcd's client would not use them), without showing
// the password, pointing at --etcd-user and FENCECTL_ETCD_PASSWORD.
func TestEtcdEndpointWithCredentials(t *testing.T) {
	g := defaultGlobalConfig()
	g.EtcdEndpoints = "http://root:Rt22Secret@127.0.0.1:2379"
	err := g.validate()
	if err == nil || !strings.Contains(err.Error(), "--etcd-user") || !strings.Contains(err.Error(), "FENCECTL_ETCD_PASSWORD") {
		t.Errorf("got %v, want a refusal pointing at --etcd-user and FENCECTL_ETCD_PASSWORD", err)
	}
	if err != nil && strings.Contains(err.Error(), "Rt22Secret") {
		t.Errorf("got %q, which shows the password", err)
	}
}
