package api_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/proxy/redis"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

// readEnv is a gateway over a Redis of its own and an election prefix of
// its own, so that it knows exactly the fences its test makes: elections
// "a" and "b", each with a leader.
type readEnv struct {
	redis *redisthrowaway.Server
	gw    *proxy.Gateway
	trail *auditTrail
	reg   *prometheus.Registry
	logs  *bytes.Buffer
}

func newReadEnv(t *testing.T, policyYAML string, shadow, authRequired bool) *readEnv {
	t.Helper()
	ctx := t.Context()
	p, err := policy.Parse([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := redisthrowaway.Start(ctx, redisthrowaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	rd, err := redis.Open(ctx, srv.Addr(), redis.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rd.Close() })
	cli := newEtcdClient(t)
	own := prefix + "/" + fenceName(t)
	for _, name := range []string{"a", "b"} {
		if _, err := cli.Put(ctx, own+"/"+name+"/k", "worker"); err != nil {
			t.Fatal(err)
		}
	}
	w, err := election.NewWatcher(cli, election.WatcherConfig{Prefix: own})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "both elections", func() bool { return w.Synced() && len(w.Terms()) == 2 })
	e := &readEnv{redis: srv, trail: &auditTrail{}, reg: prometheus.NewRegistry(), logs: &bytes.Buffer{}}
	cfg := proxy.DefaultConfig()
	cfg.PolicyShadow = shadow
	e.gw, err = proxy.New(cfg, proxy.Options{
		Terms: w, Redis: rd, Policy: p, Audit: e.trail, AuthRequired: authRequired,
		Logger: slog.New(slog.NewTextHandler(e.logs, nil)), Registerer: e.reg, Protocol: api.ProtocolOf,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// metric sums the counters name of every series with labels.
func (e *readEnv) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				if !slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool { return lp.GetName() == k && lp.GetValue() == v }) {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func caller(t *testing.T, principal string) context.Context {
	t.Helper()
	return policy.NewContext(t.Context(), &policy.Caller{Principal: principal})
}

// TestShadowListingAllowedInFull: under --policy-mode=shadow, a caller
// the policy lets read every fence there is lists them. Enforce mode
// serves the same listing with no refusal, yet each listing counted a
// shadow denial of fence.read and logged that the policy would refuse
// fence "" (Fences asked the policy about the empty fence to learn
// whether the caller was anonymous): an operator trying a policy in
// shadow mode was told it would break a caller it serves (found by red
// team 19). A listing enforce mode would narrow counts once, not once a
// fence.
func TestShadowListingAllowedInFull(t *testing.T) {
	const pol = `rules:
  - name: reader
    principals: ["spiffe://test/reader"]
    fences: ["a", "b"]
    actions: [fence.read]
`
	ctx := caller(t, "spiffe://test/reader")
	want, err := newReadEnv(t, pol, false, true).gw.Fences(ctx)
	if err != nil || len(want) != 2 {
		t.Fatalf("enforce mode: got %v, %v; want fences a and b", want, err)
	}
	e := newReadEnv(t, pol, true, true)
	for range 3 {
		if got, err := e.gw.Fences(ctx); err != nil || len(got) != 2 {
			t.Fatalf("shadow mode: got %v, %v; want fences a and b", got, err)
		}
	}
	if n := e.metric(t, "fencegate_policy_shadow_denials_total", map[string]string{"action": "fence.read"}); n != 0 {
		t.Errorf("3 listings the policy allows in full: got %v shadow denials of fence.read, want 0", n)
	}
	if strings.Contains(e.logs.String(), "policy would refuse") {
		t.Errorf("the log says the policy would refuse a listing it allows:\n%s", e.logs.String())
	}

	// A caller who may read "a" only: enforce mode lists "a"; shadow mode
	// lists both and counts each listing once.
	narrow := newReadEnv(t, strings.ReplaceAll(pol, `["a", "b"]`, `["a"]`), true, true)
	for range 2 {
		if got, err := narrow.gw.Fences(ctx); err != nil || len(got) != 2 {
			t.Fatalf("shadow mode, may read a only: got %v, %v; want fences a and b", got, err)
		}
	}
	if n := narrow.metric(t, "fencegate_policy_shadow_denials_total", map[string]string{"action": "fence.read"}); n != 2 {
		t.Errorf("2 listings enforce mode would narrow: got %v shadow denials, want 2", n)
	}
}

// TestRefusedReadsAudited: docs/SECURITY.md promises an audit record per
// refused read, and every refusal is counted. GetFence audited its
// UNAUTHENTICATED and NOT_AUTHORIZED refusals only: a ListFences refused
// UNAUTHENTICATED was counted and not audited, and a GetFence of an
// invalid fence name was neither audited nor counted, where a write or
// reset of the same name is both (found by red team 19). A read its
// backend failed was neither, and answered INTERNAL without ErrorInfo
// instead of BACKEND_UNAVAILABLE (found by red team 20).
func TestRefusedReadsAudited(t *testing.T) {
	const pol = `rules:
  - name: reader
    principals: ["spiffe://test/reader"]
    fences: ["*"]
    actions: [fence.read]
`
	e := newReadEnv(t, pol, false, true)
	anonymous := policy.NewContext(t.Context(), &policy.Caller{})
	reader := caller(t, "spiffe://test/reader")
	redisDown := func() {
		if err := e.redis.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		before func()
		read   func() error
		reason tokens.Reason
		fence  string // as recorded
	}{
		{"ListFences, anonymous", nil, func() error { _, err := e.gw.Fences(anonymous); return err }, tokens.ReasonUnauthenticated, ""},
		{"GetFence, anonymous", nil, func() error { _, err := e.gw.Fence(anonymous, "a"); return err }, tokens.ReasonUnauthenticated, "a"},
		{"GetFence, invalid name", nil, func() error {
			_, err := e.gw.Fence(reader, "bad name\n{x}")
			return err
		}, tokens.ReasonInvalidRequest, "bad name\n{x}"},
		{"GetFence, Redis down", redisDown, func() error { _, err := e.gw.Fence(reader, "a"); return err }, tokens.ReasonBackendUnavailable, "a"},
		{"ListFences, Redis down", nil, func() error { _, err := e.gw.Fences(reader); return err }, tokens.ReasonBackendUnavailable, ""},
	} {
		if tc.before != nil {
			tc.before()
		}
		e.trail.mu.Lock()
		before := len(e.trail.recs)
		e.trail.mu.Unlock()
		counted := e.metric(t, "fencegate_rejections_total", map[string]string{"reason": strings.ToLower(string(tc.reason))})
		err := tc.read()
		if r, ok := tokens.AsRefusal(err); !ok || r.Reason != tc.reason {
			t.Errorf("%s: got %v, want %s", tc.name, err, tc.reason)
			continue
		}
		e.trail.mu.Lock()
		recs := e.trail.recs[before:]
		e.trail.mu.Unlock()
		if len(recs) != 1 || recs[0].Action != string(policy.ActionFenceRead) || recs[0].Outcome != string(tc.reason) || recs[0].Fence != tc.fence {
			t.Errorf("%s: got audit records %+v, want one fence.read %s of fence %q", tc.name, recs, tc.reason, tc.fence)
		}
		if n := e.metric(t, "fencegate_rejections_total", map[string]string{"reason": strings.ToLower(string(tc.reason))}); n != counted+1 {
			t.Errorf("%s: fencegate_rejections_total{reason=%q} went from %v to %v, want one more", tc.name, strings.ToLower(string(tc.reason)), counted, n)
		}
	}
}
