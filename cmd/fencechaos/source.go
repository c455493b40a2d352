package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/election"
)

// A term is one worker's leadership: its token, and Err non-nil once the
// worker knows the term is over. *election.Leadership is one.
type term interface {
	Token() int64
	Err() error
	Resign(ctx context.Context) error
}

// A chaosSource is an election the workers campaign in (--source): etcd,
// or one of the other term sources fencegate can be routed to
// (--term-sources). Each is registered in sources by its own file.
type chaosSource struct {
	// start starts the election's own servers, after etcd and the
	// backend; nil when there are none.
	start func(ctx context.Context, c *campaign) error
	// gatewayArgs are fencegate's flags for the source (its route and
	// how to reach it).
	gatewayArgs func(c *campaign) []string
	// workerAddr is what a worker is given as --source-addr: how it
	// reaches the election (through its own cut proxies, if faults
	// partition it).
	workerAddr func(c *campaign, w *workerSlot) (string, error)
	// leader names the worker incarnation leading the fence, "" if none.
	leader func(ctx context.Context, c *campaign) string
	// campaign, in a worker, blocks until the worker leads the fence.
	campaign func(ctx context.Context, w *worker) (term, error)
	// stop stops what start started; nil when nothing.
	stop func(c *campaign)
	// ownsKey, when set, tells the keys the source keeps in the data's
	// Redis (its leases): not stray.
	ownsKey func(c *campaign, key string) bool
	// faults, when set, are the source's own faults, on its servers,
	// injected with the others.
	faults func(c *campaign) []fault
}

// sources are the --source values, by name.
var sources = map[string]chaosSource{
	election.SourceEtcd: {
		gatewayArgs: func(*campaign) []string { return nil },
		workerAddr:  func(*campaign, *workerSlot) (string, error) { return "", nil },
		leader:      etcdLeader,
		campaign: func(ctx context.Context, w *worker) (term, error) {
			return election.Campaign(ctx, w.cli, election.CampaignConfig{
				Prefix:   w.cfg.ElectionPrefx,
				Election: w.cfg.Fence,
				Value:    w.cfg.ID,
				TTL:      w.cfg.TTL,
			})
		},
	},
}

func sourceNames() string {
	names := make([]string, 0, len(sources))
	for n := range sources {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func lookupSource(name string) (chaosSource, error) {
	s, ok := sources[name]
	if !ok {
		return s, fmt.Errorf("unknown --source %q (want one of %s)", name, sourceNames())
	}
	return s, nil
}

// etcdLeader is the value the leader of the fence's etcd election
// campaigned with: its worker's incarnation name.
func etcdLeader(ctx context.Context, c *campaign) string {
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pfx := election.DefaultPrefix + "/" + c.cfg.Fence + "/"
	resp, err := c.cli.Get(gctx, pfx, clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}
