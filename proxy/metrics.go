package proxy

import (
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/tokens"
)

// Backend names, as used in the backend metric label.
const (
	BackendPostgres = "postgres"
	BackendRedis    = "redis"
)

// outcomes lists every request outcome: accepted, then each refusal reason.
var outcomes = []tokens.Reason{
	"", // accepted
	tokens.ReasonMissingToken,
	tokens.ReasonInvalidToken,
	tokens.ReasonInvalidRequest,
	tokens.ReasonStaleToken,
	tokens.ReasonTermEnded,
	tokens.ReasonUnknownTerm,
	tokens.ReasonStatementFailed,
	tokens.ReasonCommandNotAllowed,
	tokens.ReasonBackendUnavailable,
	tokens.ReasonEtcdUnavailable,
	tokens.ReasonOverloaded,
	tokens.ReasonUnauthenticated,
	tokens.ReasonNotAuthorized,
}

var backends = [...]string{BackendPostgres, BackendRedis}

// Indexes into backends.
const (
	backendPostgres = iota
	backendRedis
)

// maxFenceLabel bounds the fence names used as label values. Only fences
// this replica knows are label values (Gateway.fenceLabel), so the series
// are bounded by the elections known, not by the names clients try.
const maxFenceLabel = 128

func outcomeLabel(r tokens.Reason) string {
	if r == "" {
		return "accepted"
	}
	return r.Label()
}

// Metrics are the pipeline's request metrics. Counters for every outcome of
// the configured backends exist from the start, so rate() sees zeros; the
// hot path (accepted writes) uses children made up front and does no label
// lookup.
type Metrics struct {
	requests   *prometheus.CounterVec
	rejections *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	suspect    *prometheus.CounterVec
	shadow     *prometheus.CounterVec

	accepted         [len(backends)]prometheus.Counter
	acceptedDuration [len(backends)]prometheus.Observer
}

// NewMetrics registers the pipeline's metrics on reg, with children for
// the named backends.
func NewMetrics(reg prometheus.Registerer, enabled ...string) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_requests_total",
			Help: "Fenced write requests by backend and outcome (accepted, or the refusal reason).",
		}, []string{"backend", "outcome"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_rejections_total",
			Help: "Refused fenced writes by fence and reason.",
		}, []string{"fence", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fencegate_request_duration_seconds",
			Help:    "Time to answer a fenced write, by backend and outcome.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"backend", "outcome"}),
		suspect: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_suspect_high_water_total",
			Help: "Stale-token refusals whose backend high-water mark was above every term known for the election (tampered with, forged, or a term the watch had not delivered); such marks are not used to refuse writes from memory.",
		}, []string{"backend"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_policy_shadow_denials_total",
			Help: "Requests the policy does not allow, served anyway because --policy-mode=shadow, by action.",
		}, []string{"action"}),
	}
	for b, backend := range backends {
		m.accepted[b] = m.requests.WithLabelValues(backend, "accepted")
		m.acceptedDuration[b] = m.duration.WithLabelValues(backend, "accepted")
	}
	for _, backend := range enabled {
		for _, o := range outcomes {
			m.requests.WithLabelValues(backend, outcomeLabel(o))
		}
		m.suspect.WithLabelValues(backend)
	}
	reg.MustRegister(m.requests, m.rejections, m.duration, m.suspect, m.shadow)
	return m
}

func (m *Metrics) suspectHighWater(backend int) {
	if m != nil {
		m.suspect.WithLabelValues(backends[backend]).Inc()
	}
}

func (m *Metrics) shadowDenied(a policy.Action) {
	if m != nil {
		m.shadow.WithLabelValues(string(a)).Inc()
	}
}

// rejected counts a refused read (reads have no requests_total series).
func (m *Metrics) rejected(fence string, reason tokens.Reason) {
	if m != nil {
		m.rejections.WithLabelValues(fence, reason.Label()).Inc()
	}
}

// observe counts a request. fence is the fence label value (see
// Gateway.fenceLabel), used only for refusals.
func (m *Metrics) observe(backend int, fence string, reason tokens.Reason, seconds float64) {
	if m == nil {
		return
	}
	if reason == "" {
		m.accepted[backend].Inc()
		m.acceptedDuration[backend].Observe(seconds)
		return
	}
	label := reason.Label()
	m.requests.WithLabelValues(backends[backend], label).Inc()
	m.duration.WithLabelValues(backends[backend], label).Observe(seconds)
	m.rejections.WithLabelValues(fence, label).Inc()
}

// stateCollector exports the replica's view of terms and high-water marks at
// scrape time, so the write path pays nothing for them.
type stateCollector struct {
	g *Gateway

	highWater, term, hasLeader, leader, changes *prometheus.Desc
}

// newStateCollector returns the collector of g's state.
func newStateCollector(g *Gateway) *stateCollector {
	return &stateCollector{
		g: g,
		highWater: prometheus.NewDesc("fencegate_fence_high_water",
			"Highest token this replica has seen accepted for the fence, or a backend report that is not above the election's known terms.", []string{"fence"}, nil),
		term: prometheus.NewDesc("fencegate_election_term",
			"Current term of the election (leader key create revision); 0 when no leader.", []string{"election"}, nil),
		hasLeader: prometheus.NewDesc("fencegate_election_has_leader",
			"1 when the election has a leader, else 0.", []string{"election"}, nil),
		leader: prometheus.NewDesc("fencegate_election_leader",
			"1 for the election's current leader, by the value it campaigned with (at most 64 bytes of it); no series when there is no leader.", []string{"election", "leader"}, nil),
		changes: prometheus.NewDesc("fencegate_term_changes_total",
			"Leadership changes observed in the election (new leader or leader gone).", []string{"election"}, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.highWater
	ch <- c.term
	ch <- c.hasLeader
	ch <- c.leader
	ch <- c.changes
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	// The trackers hold only fences of known elections (learn leaves out
	// marks above every known term), so this stays bounded too.
	hws := map[string]tokens.Token{}
	for i := range c.g.trackers {
		c.g.trackers[i].Range(func(fence string, hw tokens.Token) {
			hws[fence] = max(hws[fence], hw)
		})
	}
	for fence, hw := range hws {
		ch <- prometheus.MustNewConstMetric(c.highWater, prometheus.GaugeValue, float64(hw), fence)
	}
	terms := c.g.terms.Terms()
	for i, label := range electionLabels(terms) {
		t := terms[i]
		if label == "" || !c.g.knownElection(t) {
			continue
		}
		has := 0.0
		if t.HasLeader() {
			has = 1
		}
		ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, float64(t.Rev), label)
		ch <- prometheus.MustNewConstMetric(c.hasLeader, prometheus.GaugeValue, has, label)
		if t.HasLeader() {
			ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, 1, label, leaderLabel(t.Leader))
		}
		ch <- prometheus.MustNewConstMetric(c.changes, prometheus.CounterValue, float64(t.Changes), label)
	}
}

// knownFence reports whether fence is known to this replica, for the
// metric labels naming it: a backend accepted a write to it (a mark), or
// its term source saw its election. A term learnt from a token a client
// sent (election.TokenLearner) does not make it known: the token is
// learnt before the write is tried, and anyone can send one, for a new
// name each time, and have the write refused.
func (g *Gateway) knownFence(fence string) bool {
	switch {
	case g.marked(fence):
		return true
	case g.fromTokens(fence):
		return false
	}
	return tokens.Ceiling(g.terms.Term(fence)) > 0
}

// knownElection reports whether a term the source lists gets series of its
// own: unless it was learnt from a token (knownFence), it is an election
// the source sees.
func (g *Gateway) knownElection(t election.Term) bool {
	return !g.fromTokens(t.Election) || g.marked(t.Election)
}

// fromTokens reports whether fence's terms may be learnt from a token a
// client sent (election.Router, election.Monotonic).
func (g *Gateway) fromTokens(fence string) bool {
	l, ok := g.terms.(election.TokenLearner)
	return ok && l.FromTokens(fence)
}

// marked reports whether a backend holds a mark for fence, as far as this
// replica knows: a write to it was accepted.
func (g *Gateway) marked(fence string) bool {
	for i := range g.trackers {
		if g.trackers[i].HighWater(fence) > 0 {
			return true
		}
	}
	return false
}

// electionLabels are the election label values of terms, by index: the
// name itself, or for a name that is not UTF-8 (etcd keys are bytes, and
// the registry refuses such a label value: the whole scrape would fail)
// the name with each run of invalid bytes replaced by U+FFFD. Such a
// name is never a fence name, but its election is shown. A replaced name
// that is another election's label value already is "" (no series): two
// series with the same labels fail the scrape too.
func electionLabels(terms []election.Term) []string {
	labels := make([]string, len(terms))
	var used map[string]bool
	for i, t := range terms {
		labels[i] = t.Election
		if !utf8.ValidString(t.Election) && used == nil {
			used = make(map[string]bool, len(terms))
		}
	}
	if used == nil {
		return labels
	}
	for _, t := range terms {
		if utf8.ValidString(t.Election) {
			used[t.Election] = true
		}
	}
	for i, t := range terms {
		if utf8.ValidString(t.Election) {
			continue
		}
		label := strings.ToValidUTF8(t.Election, "\uFFFD")
		if used[label] {
			label = ""
		} else {
			used[label] = true
		}
		labels[i] = label
	}
	return labels
}

// maxLeaderLabel bounds the leader label: a campaign value can be any
// bytes, of any length.
const maxLeaderLabel = 64

// leaderLabel is a campaign value as a label value: valid UTF-8 (the
// registry refuses anything else), at most maxLeaderLabel bytes.
func leaderLabel(v string) string {
	if len(v) > maxLeaderLabel {
		v = v[:maxLeaderLabel]
	}
	return strings.ToValidUTF8(v, "\uFFFD")
}
