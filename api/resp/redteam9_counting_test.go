package resp_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/audit"
)

// Red team, round 9: what fencegate tells operators (metrics, audit log)
// about writes through the RESP listener must be what happened.

type rt9Audit struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (a *rt9Audit) Write(r *audit.Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, *r)
}

func (a *rt9Audit) all() []audit.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]audit.Record(nil), a.recs...)
}

// rt9Counter is the value of the series of name with labels, 0 if absent.
func rt9Counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return rt9Value(m)
		}
	}
	return 0
}

func rt9Value(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}

func rt9Env(t *testing.T, cfg resp.Config) (*env, *prometheus.Registry, *rt9Audit) {
	t.Helper()
	reg := prometheus.NewRegistry()
	al := &rt9Audit{}
	e := newEnvWith(t, cfg, proxy.Options{Registerer: reg, Audit: al})
	return e, reg, al
}

func rt9Describe(recs []audit.Record) string {
	var b strings.Builder
	for _, r := range recs {
		b.WriteString("\n  outcome=" + r.Outcome + " statements=" + short(r.Statements) + " token=" + strconv.FormatUint(r.Token, 10))
	}
	return b.String()
}

// TestRedTeam9PipelineRerunCountedOnce: a pipeline of three commands of
// which the middle one fails in Redis (INCR of a string) is answered as
// Redis would: OK, the error, OK. The listener runs it once as a whole
// (refused: STATEMENT_FAILED, nothing applied) and then again, split. The
// client sent one failing command: fencegate_rejections_total and
// fencegate_requests_total must count one refusal, and the audit log must
// not say the two SETs, which were applied, were refused.
func TestRedTeam9PipelineRerunCountedOnce(t *testing.T) {
	e, reg, al := rt9Env(t, resp.Config{})
	f := unique("rt9pipe")
	tok, _ := e.lead(t, f)
	r := e.raw(t)
	r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)))
	r.want("+OK")
	k1, k2, s := "{"+f+"}:a", "{"+f+"}:b", "{"+f+"}:s"
	r.send(cmd("SET", s, "not-a-number"))
	r.want("+OK")
	before := len(al.all())

	// One write, all three in the read buffer at once.
	r.send(cmd("SET", k1, "1") + cmd("INCR", s) + cmd("SET", k2, "2"))
	r.wantReply("SET a", "+OK")
	r.wantReply("INCR s", "-ERR")
	r.wantReply("SET b", "+OK")
	if e.stored(t, k1) != "1" || e.stored(t, k2) != "2" {
		t.Fatalf("the SETs were not applied")
	}

	rej := rt9Counter(t, reg, "fencegate_rejections_total", map[string]string{"fence": f, "reason": "statement_failed"})
	req := rt9Counter(t, reg, "fencegate_requests_total", map[string]string{"backend": "redis", "outcome": "statement_failed"})
	if rej != 1 || req != 1 {
		t.Errorf("one failed command: fencegate_rejections_total{reason=statement_failed} = %v, fencegate_requests_total{outcome=statement_failed} = %v; want 1 and 1", rej, req)
	}
	recs := al.all()[before:]
	refused := 0
	for _, rec := range recs {
		if rec.Outcome != "accepted" {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("audit records of the pipeline: %d refused, want 1 (the INCR); records:%s", refused, rt9Describe(recs))
	}
	// The refused record must be of the INCR alone, not of the SETs too.
	for _, rec := range recs {
		if rec.Outcome != "accepted" && rec.Statements != audit.Fingerprint("INCR") {
			t.Errorf("a refused record's statements are not the INCR's alone (%s): the applied SETs are audited as refused", short(rec.Statements))
		}
	}
}

// TestRedTeam9MultiOverLimitIsARefusal: a MULTI whose queue goes over
// MaxQueued is a fenced write fencegate refuses (EXECABORT, nothing
// applied), as HTTP refuses too many commands with INVALID_REQUEST. Like
// every refused write (docs/SECURITY.md, "The audit log"), it must be
// counted in fencegate_requests_total and recorded in the audit log.
func TestRedTeam9MultiOverLimitIsARefusal(t *testing.T) {
	e, reg, al := rt9Env(t, resp.Config{MaxQueued: 2})
	f := unique("rt9multi")
	tok, _ := e.lead(t, f)
	r := e.raw(t)
	r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)))
	r.want("+OK")
	before := len(al.all())
	k := "{" + f + "}:k"
	r.send(cmd("MULTI"))
	r.want("+OK")
	for range 3 {
		r.send(cmd("INCR", k))
		r.line()
	}
	r.send(cmd("EXEC"))
	r.want("-EXECABORT")
	if v := e.stored(t, k); v != "" {
		t.Fatalf("EXECABORT applied the queue: %q", v)
	}
	var refused float64
	for _, reason := range []string{"invalid_request", "command_not_allowed", "overloaded"} {
		refused += rt9Counter(t, reg, "fencegate_requests_total", map[string]string{"backend": "redis", "outcome": reason})
	}
	if refused != 1 {
		t.Errorf("a MULTI refused over the limit: %v refusals counted in fencegate_requests_total, want 1", refused)
	}
	if n := len(al.all()) - before; n != 1 {
		t.Errorf("a MULTI refused over the limit: %d audit records, want 1", n)
	}
}

func short(s string) string { return s[:min(12, len(s))] }
