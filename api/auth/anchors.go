package auth

import (
	"crypto/x509"
	"maps"
	"sync"
	"sync/atomic"
)

// anchors is every certificate of the CA bundles (--trusted-ca-file) that
// the ServerTLS of this process have loaded, by DER, with how many of them
// hold it in the bundle in force. crypto/x509 ends a verified chain with
// a certificate of the roots pool (a CA, or an intermediate given in the
// bundle), so a chain verified by a ServerTLS ends in one of these. A
// certificate at 0 was taken out by a reload: a connection whose chains
// all end in such ones proves no one any longer, as a new handshake would
// not. Package-level because the listeners see a connection's
// tls.ConnectionState only, not the ServerTLS that verified it; serve has
// one ServerTLS. A chain that ends in a certificate no ServerTLS loaded
// (a tls.Config built by hand) is not this set's to judge.
var anchors anchorSet

// anchorSet is read on every request without a lock: a map replaced, not
// changed, on a reload.
type anchorSet struct {
	mu  sync.Mutex // one swap at a time
	cur atomic.Pointer[map[string]int]
}

// swap replaces old with cur, the anchors of one ServerTLS's bundle in
// force and of the one loaded in its place (each DER once).
func (s *anchorSet) swap(old, cur []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := map[string]int{}
	if m := s.cur.Load(); m != nil {
		n = maps.Clone(*m)
	}
	for _, k := range cur {
		n[k]++
	}
	for _, k := range old {
		n[k]--
	}
	s.cur.Store(&n)
}

// withdrawn says a ServerTLS loaded c as a trust anchor and none holds it
// now. It allocates nothing.
func (s *anchorSet) withdrawn(c *x509.Certificate) bool {
	m := s.cur.Load()
	if m == nil {
		return false
	}
	n, ok := (*m)[string(c.Raw)]
	return ok && n <= 0
}

// anchorsOf is the DER of certs, each once.
func anchorsOf(certs []*x509.Certificate) []string {
	seen := make(map[string]bool, len(certs))
	var out []string
	for _, c := range certs {
		if k := string(c.Raw); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
