package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// op is one client's request; it returns nil when the answer is the
// expected one (accepted, or for the stale scenario a STALE_TOKEN refusal).
type op func(ctx context.Context) error

// sample is the outcome of one load: latencies of the requests completed in
// the measured window, and fencegate's CPU over that window.
type sample struct {
	lat      []int64 // nanoseconds
	elapsed  time.Duration
	errors   int64
	firstErr error
	gateCPU  time.Duration
	selfCPU  time.Duration // the load tool's own process (clients, embedded etcd)
	backCPU  time.Duration // the backend server of the path
	rssMiB   float64       // peak VmRSS sampled during the window
}

func (s *sample) merge(o sample) {
	s.lat = append(s.lat, o.lat...)
	s.elapsed += o.elapsed
	s.errors += o.errors
	if s.firstErr == nil {
		s.firstErr = o.firstErr
	}
	s.gateCPU += o.gateCPU
	s.selfCPU += o.selfCPU
	s.backCPU += o.backCPU
	s.rssMiB = max(s.rssMiB, o.rssMiB)
}

// Phases of a load.
const (
	phaseWarmup = iota
	phaseMeasure
	phaseStop
)

// loadOpts says how to run one load.
type loadOpts struct {
	warmup, duration time.Duration
	gatePID          int    // 0: no gateway CPU/RSS to read
	backendPID       int    // the backend server: PostgreSQL's postmaster or redis-server
	profile          string // when set, a CPU profile of the gateway is saved here
	pprofAddr        string
}

// runLoad runs ops (one per client) closed-loop: each client issues its
// next request as soon as the previous one answered.
func runLoad(ctx context.Context, ops []op, o loadOpts) (sample, error) {
	var (
		phase atomic.Int32
		wg    sync.WaitGroup
		mu    sync.Mutex
		out   sample
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, f := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]int64, 0, 1<<14)
			var errs int64
			var firstErr error
			for {
				p := phase.Load()
				if p == phaseStop || ctx.Err() != nil {
					break
				}
				t0 := time.Now()
				err := f(ctx)
				d := time.Since(t0)
				if phase.Load() != phaseMeasure || p != phaseMeasure {
					continue // started or ended outside the window
				}
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				lat = append(lat, int64(d))
			}
			mu.Lock()
			out.lat = append(out.lat, lat...)
			out.errors += errs
			if out.firstErr == nil {
				out.firstErr = firstErr
			}
			mu.Unlock()
		}()
	}
	if !sleepCtx(ctx, o.warmup) {
		cancel()
		wg.Wait()
		return out, ctx.Err()
	}
	var cpu0, self0, back0 time.Duration
	if o.gatePID != 0 {
		cpu0, _ = cpuTime(o.gatePID)
	}
	self0, _ = cpuTime(os.Getpid())
	if o.backendPID != 0 {
		back0, _ = treeCPUTime(o.backendPID)
	}
	var profDone chan error
	if o.profile != "" && o.pprofAddr != "" {
		profDone = make(chan error, 1)
		go func() { profDone <- fetchProfile(ctx, o.pprofAddr, o.duration, o.profile) }()
	}
	start := time.Now()
	phase.Store(phaseMeasure)
	rssDone := make(chan float64, 1)
	stopRSS := make(chan struct{})
	go func() {
		peak := 0.0
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if o.gatePID != 0 {
				if rss, _, err := memStatus(o.gatePID); err == nil {
					peak = max(peak, rss)
				}
			}
			select {
			case <-stopRSS:
				rssDone <- peak
				return
			case <-t.C:
			}
		}
	}()
	ok := sleepCtx(ctx, o.duration)
	phase.Store(phaseStop)
	out.elapsed = time.Since(start)
	if o.gatePID != 0 {
		cpu1, _ := cpuTime(o.gatePID)
		out.gateCPU = cpu1 - cpu0
	}
	self1, _ := cpuTime(os.Getpid())
	out.selfCPU = self1 - self0
	if o.backendPID != 0 {
		back1, _ := treeCPUTime(o.backendPID)
		out.backCPU = back1 - back0
	}
	close(stopRSS)
	out.rssMiB = <-rssDone
	wg.Wait()
	if profDone != nil {
		if err := <-profDone; err != nil {
			logf("profile %s: %v", o.profile, err)
		}
	}
	if !ok {
		return out, ctx.Err()
	}
	return out, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// fetchProfile saves a CPU profile of the gateway taken over d.
func fetchProfile(ctx context.Context, addr string, d time.Duration, path string) error {
	secs := max(1, int(d/time.Second))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return saveBody(resp.Body, path)
}

func saveHeapProfile(ctx context.Context, addr, path string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return saveBody(resp.Body, path)
}

func saveBody(r io.Reader, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// percentile returns the q-quantile (0..1) of sorted, nearest rank.
func percentile(sorted []int64, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	i = min(max(i, 0), len(sorted)-1)
	return time.Duration(sorted[i])
}

// summarise turns a sample into a result row.
func summarise(scenario, path string, clients int, s sample, gateway bool) result {
	slices.Sort(s.lat)
	r := result{
		Scenario: scenario, Path: path, Clients: clients,
		P50us:  us(percentile(s.lat, 0.50)),
		P99us:  us(percentile(s.lat, 0.99)),
		Errors: s.errors,
	}
	if s.elapsed > 0 {
		r.OpsPerSec = float64(len(s.lat)) / s.elapsed.Seconds()
	}
	if n := float64(len(s.lat) + int(s.errors)); n > 0 {
		c := us(s.selfCPU) / n
		r.ClientCPU = &c
		bc := us(s.backCPU) / n
		r.BackendCPU = &bc
	}
	if gateway && len(s.lat) > 0 {
		c := us(s.gateCPU) / float64(len(s.lat)+int(s.errors))
		r.CPUusPerOp = &c
		rss := round1(s.rssMiB)
		r.RSSMiB = &rss
	}
	if s.firstErr != nil {
		r.Note = "first error: " + truncate(s.firstErr.Error(), 160)
	}
	return r
}

func us(d time.Duration) float64 { return round1(float64(d) / float64(time.Microsecond)) }

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func numCPU() int { return runtime.NumCPU() }
