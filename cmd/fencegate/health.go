package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
)

// readinessInterval is how often the readiness check runs for the gRPC
// health service's watchers and the fencegate_ready gauge.
const readinessInterval = time.Second

// readiness publishes what /readyz answers to the standard gRPC health
// service (grpc.health.v1.Health, for the whole server "" and for
// fencegate.v1.Gateway) and to the fencegate_ready gauge, and logs its
// changes. The health service's Check runs the readiness check itself, so
// it answers SERVING exactly when /readyz would answer 200; Watch and the
// gauge follow the last check, run every readinessInterval or by /readyz.
type readiness struct {
	check  func(context.Context) error
	health *health.Server
	gauge  prometheus.Gauge
	log    *slog.Logger

	// draining is closed when the server starts draining: it ends the
	// health watches, which would otherwise hold GracefulStop up.
	draining chan struct{}
	// watches holds a slot per open watch (maxHealthWatches), and refuses
	// callers with no identity where one is required.
	watches *streamSlots

	mu        sync.Mutex
	known     bool
	wasReady  bool   // ready at least once: later failures are warnings
	lastError string // "" when ready
}

// maxHealthWatches bounds the health watches open at once, server-wide:
// each holds goroutines for as long as its client likes. Probes use
// Check; Watch is for the client-side health checking of gRPC clients,
// one per connection. One caller may hold a quarter of them (streamSlots).
const maxHealthWatches = 1024

// newReadiness returns the readiness of a server; authRequired says the
// server refuses callers with no identity, whose health watches it then
// refuses too (Check stays open to probes).
func newReadiness(reg prometheus.Registerer, log *slog.Logger, authRequired bool, check func(context.Context) error) *readiness {
	r := &readiness{
		check:   check,
		watches: newStreamSlots(maxHealthWatches, authRequired, "health watches", "probes use Check"),
		health:  health.NewServer(),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_ready",
			Help: "1 when this replica is ready (what /readyz answers 200 to: election watch synced, etcd and the backends answer), else 0.",
		}),
		log:      log,
		draining: make(chan struct{}),
	}
	reg.MustRegister(r.gauge)
	for _, svc := range r.services() {
		r.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	return r
}

func (r *readiness) services() []string {
	return []string{"", fencegatev1.Gateway_ServiceDesc.ServiceName}
}

// register adds the health service to gs.
func (r *readiness) register(gs *grpc.Server) {
	healthpb.RegisterHealthServer(gs, healthService{r.health, r})
}

// run checks readiness every interval until ctx is done, then reports
// NOT_SERVING for good, so load balancers stop sending while the server
// drains, and ends the health watches. It returns nil.
func (r *readiness) run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		r.refresh(ctx)
		select {
		case <-ctx.Done():
			r.mu.Lock()
			r.health.Shutdown()
			r.gauge.Set(0)
			close(r.draining)
			r.mu.Unlock()
			return nil
		case <-t.C:
		}
	}
}

// Check runs the readiness check, publishes its answer and returns it: the
// /readyz handler's check, so what it answers is what the health service
// reports from then on.
func (r *readiness) Check(ctx context.Context) error {
	err := r.check(ctx)
	r.publish(ctx, err)
	return err
}

func (r *readiness) refresh(ctx context.Context) { _ = r.Check(ctx) }

// publish sets the health status and the gauge from a check's answer.
func (r *readiness) publish(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // the check was cut short, not failed
	}
	st, gauge, msg := healthpb.HealthCheckResponse_SERVING, 1.0, ""
	if err != nil {
		st, gauge, msg = healthpb.HealthCheckResponse_NOT_SERVING, 0, err.Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.draining:
		return // NOT_SERVING for good
	default:
	}
	for _, svc := range r.services() {
		r.health.SetServingStatus(svc, st)
	}
	r.gauge.Set(gauge)
	if r.known && msg == r.lastError {
		return
	}
	switch {
	case msg == "":
		r.log.Info("ready")
		r.wasReady = true
	case r.wasReady:
		r.log.Warn("not ready", "reason", msg)
	default:
		r.log.Debug("not ready yet", "reason", msg)
	}
	r.known, r.lastError = true, msg
}

// healthService answers Check from a fresh readiness check; List is the
// standard server's.
type healthService struct {
	*health.Server
	r *readiness
}

func (h healthService) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.r.refresh(ctx)
	return h.Server.Check(ctx, req)
}

// Watch is the standard server's, except that the stream ends, after
// NOT_SERVING, once the server drains: a watch never ends on its own, and
// GracefulStop would wait for it for the whole --shutdown-timeout. A
// watch lives as long as its client likes: it is refused to callers with
// no identity where one is required (UNAUTHENTICATED, as their writes
// are), and past maxHealthWatches (RESOURCE_EXHAUSTED).
func (h healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	release, err := h.r.watches.enter(stream.Context())
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-h.r.draining:
			cancel()
		case <-ctx.Done():
		}
	}()
	err = h.Server.Watch(req, watchStream{stream, ctx})
	select {
	case <-h.r.draining:
	default:
		return err
	}
	// The standard server may have ended before sending it.
	_ = stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})
	return status.Error(codes.Unavailable, "fencegate: shutting down")
}

// watchStream is a health watch stream with a context that also ends when
// the server drains.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (s watchStream) Context() context.Context { return s.ctx }
