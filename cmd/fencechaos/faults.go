package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/election"
)

// A fault hurts the cluster and, before it returns, heals it (continues,
// restores or restarts what it hurt). It reports what it did and whether
// it found something to hurt.
type fault struct {
	name string
	do   func(ctx context.Context) (what string, injected bool, err error)
}

func (c *campaign) faults() []fault {
	fs := []fault{
		{"pause-leader", c.pauseLeader},
		{"pause-leader", c.pauseLeader},
		{"kill-leader", c.killLeader},
		{"partition-leader", c.partitionLeader},
		{"kill-gateway", c.killGateway},
		{"pause-gateway", c.pauseGateway},
		{"stall-backend", c.stallBackend},
		{"restart-backend", c.restartBackend},
		{"kill-etcd-member", func(ctx context.Context) (string, bool, error) { return c.killEtcd(ctx, false) }},
		{"kill-etcd-leader", func(ctx context.Context) (string, bool, error) { return c.killEtcd(ctx, true) }},
	}
	if c.source.faults != nil {
		fs = append(fs, c.source.faults(c)...)
	}
	return fs
}

// faultNames lists the kinds of fault, for --faults.
// Those of a --source act on its servers only (kill-zookeeper).
func faultNames() []string {
	var names []string
	add := func(fs []fault) {
		for _, f := range fs {
			if !slices.Contains(names, f.name) {
				names = append(names, f.name)
			}
		}
	}
	add((&campaign{}).faults())
	for _, name := range slices.Sorted(maps.Keys(sources)) {
		if src := sources[name]; src.faults != nil {
			add(src.faults(&campaign{}))
		}
	}
	return names
}

// injectFaults runs faults until the deadline: each round is every kind of
// fault in an order drawn from the seed (the first round starts with a
// paused leader, the zombie the control run needs), with a random quiet
// gap before each.
func (c *campaign) injectFaults(ctx context.Context, deadline time.Time) (int, error) {
	n := 0
	first := true
	for {
		bag := c.faults()
		if len(c.cfg.Faults) > 0 {
			bag = slices.DeleteFunc(bag, func(f fault) bool { return !slices.Contains(c.cfg.Faults, f.name) })
		}
		c.rng.Shuffle(len(bag), func(i, j int) { bag[i], bag[j] = bag[j], bag[i] })
		if first {
			for i, f := range bag {
				if f.name == "pause-leader" {
					bag[0], bag[i] = bag[i], bag[0]
					break
				}
			}
			first = false
		}
		for _, f := range bag {
			gap := c.cfg.GapMin + time.Duration(c.rng.Int64N(int64(c.cfg.GapMax-c.cfg.GapMin)+1))
			if time.Until(deadline) < gap {
				sleepUntil(ctx, deadline)
				return n, nil
			}
			if !sleepFor(ctx, gap) {
				return n, nil
			}
			what, injected, err := f.do(ctx)
			if err != nil {
				return n, fmt.Errorf("fault %s: %w", f.name, err)
			}
			if injected {
				n++
				c.logf("fault %d %s: %s", n, f.name, what)
			} else {
				c.logf("fault %s skipped: %s", f.name, what)
			}
			if ctx.Err() != nil {
				return n, nil
			}
		}
	}
}

func sleepFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func sleepUntil(ctx context.Context, t time.Time) bool { return sleepFor(ctx, time.Until(t)) }

// between draws a duration in [lo, hi].
func (c *campaign) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(c.rng.Int64N(int64(hi-lo)+1))
}

func (c *campaign) hold(ch *child, held bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if held {
		c.held[ch] = true
	} else {
		delete(c.held, ch)
	}
}

// liveLeader waits a little for a leader that is a running worker.
func (c *campaign) liveLeader(ctx context.Context) *workerSlot {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if w := c.leader(ctx); w != nil {
			return w
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pauseLeader is the GC-pause zombie: SIGSTOP the leader past its TTL, so
// another worker is elected and writes, then SIGCONT it.
func (c *campaign) pauseLeader(ctx context.Context) (string, bool, error) {
	w := c.liveLeader(ctx)
	if w == nil {
		return "no live leader", false, nil
	}
	name := w.name()
	d := c.between(c.cfg.TTL+time.Second, c.cfg.TTL+2500*time.Millisecond)
	if err := w.proc.signal(syscall.SIGSTOP); err != nil {
		return err.Error(), false, nil
	}
	sleepFor(ctx, d)
	_ = w.proc.signal(syscall.SIGCONT)
	return fmt.Sprintf("%s stopped for %s", name, d.Round(time.Millisecond)), true, nil
}

// killLeader SIGKILLs the leader and starts a new incarnation of it.
func (c *campaign) killLeader(ctx context.Context) (string, bool, error) {
	w := c.liveLeader(ctx)
	if w == nil {
		return "no live leader", false, nil
	}
	name := w.name()
	c.hold(w.proc, true)
	w.proc.kill()
	d := c.between(500*time.Millisecond, 2*time.Second)
	sleepFor(ctx, d)
	if err := c.restartWorker(w); err != nil {
		return "", false, err
	}
	return fmt.Sprintf("%s killed, %s restarted after %s", name, w.name(), d.Round(time.Millisecond)), true, nil
}

// partitionLeader cuts the leader off from its election, etcd and the
// --source's servers (it still reaches fencegate and the backend), past
// its TTL, then heals the partition.
func (c *campaign) partitionLeader(ctx context.Context) (string, bool, error) {
	w := c.liveLeader(ctx)
	if w == nil {
		return "no live leader", false, nil
	}
	name := w.name()
	d := c.between(c.cfg.TTL+time.Second, c.cfg.TTL+3*time.Second)
	for _, p := range w.proxies {
		p.Cut()
	}
	sleepFor(ctx, d)
	for _, p := range w.proxies {
		p.Restore()
	}
	from := "etcd"
	if c.cfg.Source != election.SourceEtcd {
		from = "etcd and " + c.cfg.Source
	}
	return fmt.Sprintf("%s cut off from %s for %s", name, from, d.Round(time.Millisecond)), true, nil
}

// killGateway SIGKILLs a fencegate replica and restarts it.
func (c *campaign) killGateway(ctx context.Context) (string, bool, error) {
	g := c.gateways[c.rng.IntN(len(c.gateways))]
	c.hold(g.child, true)
	defer c.hold(g.child, false)
	g.kill()
	d := c.between(300*time.Millisecond, 1500*time.Millisecond)
	sleepFor(ctx, d)
	if err := g.start(); err != nil {
		return "", false, err
	}
	if err := c.waitReady(ctx, g, 30*time.Second); err != nil {
		c.surprise(err.Error())
	}
	return fmt.Sprintf("%s killed, restarted after %s", g.name, d.Round(time.Millisecond)), true, nil
}

// pauseGateway is the GC-pause zombie on fencegate's side: SIGSTOP a
// replica; the leader goes on writing, and its requests routed to the
// stopped replica wait there. Then SIGSTOP the leader too (killing it would
// close its connections and cancel those requests), so that a new one is
// elected and writes through the other replica. SIGCONT the replica: it
// handles the old leader's requests, old token and all, possibly before its
// election watch has caught up. Only the check in the backend, atomic with
// the write, stops them. The old leader is continued last.
func (c *campaign) pauseGateway(ctx context.Context) (string, bool, error) {
	g := c.gateways[c.rng.IntN(len(c.gateways))]
	w := c.liveLeader(ctx)
	if err := g.signal(syscall.SIGSTOP); err != nil {
		return err.Error(), false, nil
	}
	what := c.stopLeaderWhile(ctx, w, func() { _ = g.signal(syscall.SIGCONT) })
	return g.name + " stopped for " + what, true, nil
}

// stallBackend holds everything the backend answers one replica, while
// its requests still reach the backend; 0.1-0.5 s later it SIGSTOPs the
// leader, whose requests through that replica now wait there. A new leader
// is elected and writes through the other replica. Then the answers are
// released, the stalled replica goes on with the old leader's requests, and
// the old leader is continued last.
//
// With the check atomic with the write this is harmless: each stalled
// write was applied whole, before the new term's, and only its answer was
// late. A fencegate that checks in one transaction and writes in a second
// now sends the second after the new leader's writes: the race a slow
// network between fencegate and the backend opens. Workers that use HTTP
// matter here: their deadline is not sent with the request, so the stopped
// old leader's request stays alive in the replica (a gRPC deadline ends it
// there).
func (c *campaign) stallBackend(ctx context.Context) (string, bool, error) {
	g := c.gateways[c.rng.IntN(len(c.gateways))]
	w := c.liveLeader(ctx)
	g.backend.Stall()
	what := c.stopLeaderWhile(ctx, w, g.backend.Release)
	return g.name + "'s backend answers held for " + what, true, nil
}

// stopLeaderWhile is the second half of the faults that hold a replica's
// requests (pauseGateway, stallBackend), called once the replica is hurt:
// 0.1-0.5 s later it SIGSTOPs the leader, so that its requests routed there
// wait there; after TTL+1.5 s to TTL+3 s it heals the replica, and 0.2-1 s
// later continues the old leader. It says what happened, from the hurt on.
func (c *campaign) stopLeaderWhile(ctx context.Context, w *workerSlot, heal func()) string {
	lead := c.between(100*time.Millisecond, 500*time.Millisecond)
	sleepFor(ctx, lead)
	leader := "no leader"
	if w != nil {
		leader = w.name()
		_ = w.proc.signal(syscall.SIGSTOP)
	}
	d := c.between(c.cfg.TTL+1500*time.Millisecond, c.cfg.TTL+3*time.Second)
	sleepFor(ctx, d)
	heal()
	after := c.between(200*time.Millisecond, time.Second)
	sleepFor(ctx, after)
	if w != nil {
		_ = w.proc.signal(syscall.SIGCONT)
	}
	return fmt.Sprintf("%s, leader %s stopped %s after it and continued %s after it",
		(lead + d).Round(time.Millisecond), leader, lead.Round(time.Millisecond), after.Round(time.Millisecond))
}

// restartBackend restarts PostgreSQL (alternately a fast shutdown and a
// SIGKILL crash with recovery) or Redis (SIGTERM; it saves a snapshot and
// loads it back).
func (c *campaign) restartBackend(ctx context.Context) (string, bool, error) {
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if c.pg != nil {
		crash := c.rng.IntN(2) == 0
		how := "fast shutdown and start"
		if crash {
			how = "SIGKILL and crash recovery"
			if err := c.pg.Kill(); err != nil {
				return "", false, err
			}
		}
		if err := c.pg.Restart(rctx); err != nil {
			return "", false, fmt.Errorf("postgres restart: %w", err)
		}
		return "postgres " + how, true, nil
	}
	if err := c.rd.Restart(rctx); err != nil {
		return "", false, fmt.Errorf("redis restart: %w", err)
	}
	if err := c.redisPersist(rctx); err != nil {
		return "", false, err
	}
	return "redis SIGTERM (snapshot) and start", true, nil
}

// killEtcd SIGKILLs an etcd member, the raft leader if leader is set, and
// restarts it on its data.
func (c *campaign) killEtcd(ctx context.Context, leader bool) (string, bool, error) {
	i := c.rng.IntN(len(c.etcd))
	if leader {
		i = c.etcdLeader(ctx)
		if i < 0 {
			return "no etcd leader found", false, nil
		}
	}
	m := c.etcd[i]
	c.hold(m, true)
	defer c.hold(m, false)
	m.kill()
	d := c.between(time.Second, 3*time.Second)
	sleepFor(ctx, d)
	if err := m.start(); err != nil {
		return "", false, err
	}
	return fmt.Sprintf("%s killed, restarted after %s", m.name, d.Round(time.Millisecond)), true, nil
}

// etcdLeader returns the index of the raft leader, or -1.
func (c *campaign) etcdLeader(ctx context.Context) int {
	for i, u := range c.etcdURLs {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.cli.Status(sctx, u)
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}
