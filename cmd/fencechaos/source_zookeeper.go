package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/netfault"
	"github.com/fencegate/fencegate/election/zookeeper"
	"github.com/fencegate/fencegate/election/zookeeper/throwaway"
)

// --source=zookeeper: a throwaway ZooKeeper server; workers campaign with
// ephemeral sequential latch- nodes (their --id as data) and lead when
// theirs has the lowest sequence; fencegate routes the fence to its
// zookeeper term source. Each worker reaches ZooKeeper through a cut proxy
// of its own, so partition-leader cuts it off from its election too.
func init() {
	sources[election.SourceZooKeeper] = chaosSource{
		start:       zkChaos.start,
		gatewayArgs: zkChaos.gatewayArgs,
		workerAddr:  zkChaos.workerAddr,
		leader:      zkChaos.leader,
		campaign:    zkCampaign,
		stop:        zkChaos.stop,
		faults: func(c *campaign) []fault {
			return []fault{{"kill-zookeeper", func(ctx context.Context) (string, bool, error) { return zkChaos.kill(ctx, c) }}}
		},
	}
}

// zkChaos is the campaign's side of the zookeeper source (one campaign per
// process).
var zkChaos = &zkCampaignState{proxies: map[int]*netfault.Proxy{}}

type zkCampaignState struct {
	srv  *throwaway.Server
	conn *zk.Conn // the campaign's own session, to see who leads

	mu      sync.Mutex
	proxies map[int]*netfault.Proxy // by worker slot
}

func zkElection(fence string) string { return zookeeper.DefaultRoot + "/" + fence }

func (s *zkCampaignState) start(ctx context.Context, c *campaign) error {
	srv, err := throwaway.Start(ctx, throwaway.Options{
		// Sessions as short as the workers' TTL, and as long as asked.
		TickTime:          100 * time.Millisecond,
		MaxSessionTimeout: max(2*time.Second, 2*c.cfg.TTL),
	})
	if err != nil {
		return err
	}
	s.srv = srv
	conn, _, err := zk.Connect([]string{srv.Addr()}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
	if err != nil {
		return err
	}
	s.conn = conn
	c.logf("zookeeper at %s (pid %d)", srv.Addr(), srv.PID())
	return nil
}

func (s *zkCampaignState) gatewayArgs(c *campaign) []string {
	return []string{
		"--term-sources=" + c.cfg.Fence + "=zookeeper",
		"--zookeeper-servers=" + s.srv.Addr(),
		"--zookeeper-session-timeout=" + max(2*time.Second, c.cfg.TTL).String(),
	}
}

// workerAddr is the worker slot's own cut proxy to ZooKeeper, made once
// and added to the slot's proxies, which partition-leader cuts.
func (s *zkCampaignState) workerAddr(c *campaign, w *workerSlot) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proxies[w.idx]
	if p == nil {
		var err error
		if p, err = netfault.New(s.srv.Addr()); err != nil {
			return "", err
		}
		s.proxies[w.idx] = p
		c.mu.Lock()
		w.proxies = append(w.proxies, p)
		c.mu.Unlock()
	}
	return p.Addr(), nil
}

// leader is the data (a worker incarnation's --id) of the election's
// lowest-sequence candidate.
func (s *zkCampaignState) leader(_ context.Context, c *campaign) string {
	path := zkElection(c.cfg.Fence)
	children, _, err := s.conn.Children(path)
	if err != nil {
		return ""
	}
	lead, ok := zookeeper.Leader(children)
	if !ok {
		return ""
	}
	data, _, err := s.conn.Get(path + "/" + lead)
	if err != nil {
		return ""
	}
	return string(data)
}

// kill crashes the ZooKeeper server (SIGKILL) and restarts it on the
// same port and data after an outage drawn between 0.5 s and twice the
// sessions' timeout. Every session loses its connection at once, the
// leader's and the replicas' included: careful workers end their terms,
// reckless ones write on, and no one can be elected or verify a new term
// until the server is back. The server keeps the sessions and their nodes
// across the restart; sessions not resumed within their timeout then
// expire.
func (s *zkCampaignState) kill(ctx context.Context, c *campaign) (string, bool, error) {
	pid := s.srv.PID()
	s.srv.Kill()
	down := c.between(500*time.Millisecond, 2*max(2*time.Second, c.cfg.TTL))
	sleepFor(ctx, down)
	start := time.Now()
	// Restarted even when the campaign ends meanwhile: what a fault hurts,
	// it heals.
	if err := s.srv.Restart(context.WithoutCancel(ctx)); err != nil {
		return "", false, err
	}
	return fmt.Sprintf("killed zookeeper (pid %d), down %v, back in %v (pid %d)",
		pid, down, time.Since(start).Round(time.Millisecond), s.srv.PID()), true, nil
}

func (s *zkCampaignState) stop(*campaign) {
	if s.conn != nil {
		s.conn.Close()
	}
	if s.srv != nil {
		s.srv.Close()
	}
}

// quietZK drops the ZooKeeper client's reconnection chatter.
type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// zkTerm is a worker's leadership in a ZooKeeper election: its own
// session and candidate node. Like a careful Curator or kazoo worker it
// takes the term as over as soon as the session is suspended (the
// connection lost), before the session can have expired, and when its
// node is deleted.
type zkTerm struct {
	conn  *zk.Conn
	node  string
	token int64
	err   atomic.Pointer[error]
}

func (t *zkTerm) Token() int64 { return t.token }

func (t *zkTerm) Err() error {
	if p := t.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (t *zkTerm) end(err error) { t.err.CompareAndSwap(nil, &err) }

// Resign deletes the candidate node and ends the session.
func (t *zkTerm) Resign(context.Context) error {
	t.end(errors.New("resigned"))
	err := t.conn.Delete(t.node, -1)
	t.conn.Close()
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// zkCampaign, in a worker, opens a session, creates the worker's
// candidate and blocks until it has the lowest sequence.
func zkCampaign(ctx context.Context, w *worker) (term, error) {
	if w.cfg.SourceAddr == "" {
		return nil, errors.New("zookeeper: --source-addr is empty")
	}
	t := &zkTerm{}
	sessionLost := make(chan struct{})
	var lostOnce sync.Once
	conn, _, err := zk.Connect(splitList(w.cfg.SourceAddr), w.cfg.TTL,
		zk.WithLogInfo(false), zk.WithLogger(quietZK{}),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type != zk.EventSession {
				return
			}
			switch ev.State {
			case zk.StateDisconnected, zk.StateExpired, zk.StateAuthFailed:
				t.end(fmt.Errorf("zookeeper session %s", ev.State))
				lostOnce.Do(func() { close(sessionLost) })
			}
		}))
	if err != nil {
		return nil, err
	}
	t.conn = conn
	fail := func(err error) (term, error) {
		conn.Close()
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Second)
	for conn.State() != zk.StateHasSession {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fail(errors.New("zookeeper: no session"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	path := zkElection(w.cfg.Fence)
	if err := zkMkdirs(conn, path); err != nil {
		return fail(err)
	}
	node, err := conn.Create(path+"/latch-", []byte(w.cfg.ID), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		return fail(err)
	}
	t.node = node
	mine := filepath.Base(node)
	for {
		if t.Err() != nil {
			return fail(t.Err())
		}
		children, _, err := conn.Children(path)
		if err != nil {
			return fail(err)
		}
		lead, ok := zookeeper.Leader(children)
		if !ok {
			return fail(errors.New("zookeeper: own candidate gone"))
		}
		if lead == mine {
			break
		}
		// Wait for the candidate just before ours to go (no herd).
		prev := ""
		for _, ch := range children {
			if ch < mine && strings.HasPrefix(ch, "latch-") && ch > prev {
				prev = ch
			}
		}
		if prev == "" {
			prev = lead
		}
		ok, _, ev, err := conn.ExistsW(path + "/" + prev)
		if err != nil {
			return fail(err)
		}
		if !ok {
			continue
		}
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-sessionLost:
			return fail(t.Err())
		case <-ev:
		}
	}
	ok, st, ev, err := conn.ExistsW(node)
	if err != nil {
		return fail(fmt.Errorf("zookeeper: own candidate: %w", err))
	}
	if !ok {
		return fail(errors.New("zookeeper: own candidate gone"))
	}
	t.token = st.Czxid
	go func() {
		// The node's deletion (or a lost watch) ends the term.
		e := <-ev
		t.end(fmt.Errorf("zookeeper: candidate %s: %s", e.Type, e.State))
	}()
	return t, nil
}

func zkMkdirs(conn *zk.Conn, path string) error {
	p := ""
	for _, part := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		p += "/" + part
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}
