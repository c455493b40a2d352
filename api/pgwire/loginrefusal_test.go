package pgwire_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/api/pgwire"
	"github.com/fencegate/fencegate/proxy"
)

// TestLoginRefusalsRecorded: a connection the listener refuses at its
// start for a fence or token of the wrong form (a worker with a broken
// PGOPTIONS) was refused to the client alone: no count in
// fencegate_rejections_total or fencegate_requests_total, no log line, no
// audit record, so that on-call could not see a worker that never wrote
// (found by an on-call walkthrough). Each is now recorded as the refused
// write it stands for.
func TestLoginRefusalsRecorded(t *testing.T) {
	var trail auditTrail
	reg := prometheus.NewRegistry()
	e := newEnvWith(t, pgwire.Config{}, envOptions{audit: &trail, proxy: proxy.Options{Registerer: reg}})
	for _, tc := range []struct {
		name, options, reason, fence string
	}{
		{"malformed token", "-c fencegate.fence=loginref -c fencegate.token=x1", "INVALID_TOKEN", "loginref"},
		{"missing token", "-c fencegate.fence=loginref", "MISSING_TOKEN", "loginref"},
		{"bad fence name", "-c fencegate.fence=bad{name} -c fencegate.token=1", "INVALID_REQUEST", "bad{name}"},
	} {
		before := len(trail.records())
		cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://worker@%s/postgres?sslmode=disable", e.addr))
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["options"] = tc.options
		if c, err := pgx.ConnectConfig(t.Context(), cfg); err == nil {
			c.Close(t.Context())
			t.Fatalf("%s: connected", tc.name)
		}
		recs := trail.records()[before:]
		if len(recs) != 1 || recs[0].Outcome != tc.reason || recs[0].Fence != tc.fence || recs[0].Protocol != proxy.ProtocolPgwire || recs[0].Action != "sql.write" {
			t.Errorf("%s: got audit records %+v, want one sql.write %s of fence %q over pgwire", tc.name, recs, tc.reason, tc.fence)
		}
	}
	// Counted as refused writes, under _other: fences no election or
	// backend knows get no label of their own.
	for _, c := range []struct {
		fence, reason string
		want          float64
	}{{"_other", "invalid_token", 1}, {"_other", "missing_token", 1}, {"_other", "invalid_request", 1}} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := 0.0
		for _, mf := range mfs {
			if mf.GetName() != "fencegate_rejections_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, lp := range m.GetLabel() {
					labels[lp.GetName()] = lp.GetValue()
				}
				if labels["fence"] == c.fence && labels["reason"] == c.reason {
					got += m.GetCounter().GetValue()
				}
			}
		}
		if got != c.want {
			t.Errorf("fencegate_rejections_total{fence=%q,reason=%q}: got %v, want %v", c.fence, c.reason, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(reg, "fencegate_requests_total"); n == 0 {
		t.Errorf("fencegate_requests_total: no series after three refused logins")
	}
}
