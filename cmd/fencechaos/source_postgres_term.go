package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/netfault"
)

// The postgres-term source: the seed worker's advisory lock and term row,
// in the campaign's PostgreSQL. Each worker campaigns on a session of its
// own through its own cut proxy, with idle_session_timeout = --ttl, so the
// session is the worker's lease: a partition of the worker from the
// database, a SIGSTOP longer than the TTL (the session is idle and the
// server ends it) and a kill all end the session, release the lock and let
// another worker raise the term, and the old leader, until it notices, is
// a zombie. (The seed's own worker, without such a timeout, keeps its lock
// through a SIGSTOP, however long: the kernel keeps its TCP session, and
// nobody can take over, a stall rather than a zombie.)
func init() {
	sources[election.SourcePostgresTerm] = chaosSource{
		start: pgTermStart,
		gatewayArgs: func(c *campaign) []string {
			return []string{"--term-sources=" + c.cfg.Fence + "=" + election.SourcePostgresTerm}
		},
		workerAddr: pgTermWorkerAddr,
		leader:     pgTermLeader,
		campaign:   pgTermCampaign,
	}
}

const pgTermRaise = `INSERT INTO leadership_term(name, term) VALUES ($1, 1)
ON CONFLICT (name) DO UPDATE SET term = leadership_term.term + 1 RETURNING term`

func pgTermStart(ctx context.Context, c *campaign) error {
	if c.pg == nil {
		return errors.New("--source=postgres-term needs --backend=postgres: fencegate checks its terms inside PostgreSQL writes only")
	}
	conn, err := pgx.Connect(ctx, c.pg.DSN())
	if err != nil {
		return fmt.Errorf("postgres-term: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// The gateways' role reads the table (the throwaway's runtime role has
	// SELECT on public's tables); fencegate_owner reads and locks rows.
	_, err = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS leadership_term (name text PRIMARY KEY, term bigint NOT NULL);
GRANT SELECT, UPDATE (term) ON leadership_term TO fencegate_owner`)
	if err != nil {
		return fmt.Errorf("postgres-term: create the term table: %w", err)
	}
	return nil
}

// pgTermWorkerAddr is the worker's own cut proxy to PostgreSQL, made once
// per worker slot: its partitions cut the worker's election session.
func pgTermWorkerAddr(c *campaign, w *workerSlot) (string, error) {
	if w.pgTerm == nil {
		p, err := netfault.New(c.backendAddr())
		if err != nil {
			return "", err
		}
		w.pgTerm = p
		w.proxies = append(w.proxies, p)
	}
	return w.pgTerm.Addr(), nil
}

// pgTermLeader is the worker incarnation whose session holds the lock: its
// application_name.
func pgTermLeader(ctx context.Context, c *campaign) string {
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(gctx, c.pg.DSN())
	if err != nil {
		return ""
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var name string
	err = conn.QueryRow(gctx, `SELECT a.application_name FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.classid = ((hashtext($1)::bigint >> 32) & 4294967295)::oid
  AND l.objid = (hashtext($1)::bigint & 4294967295)::oid`, c.cfg.Fence).Scan(&name)
	if err != nil {
		return ""
	}
	return name
}

// pgTermCampaign blocks until the worker's session wins the fence's
// advisory lock, then raises the term: the seed worker.
func pgTermCampaign(ctx context.Context, w *worker) (term, error) {
	cc, err := pgx.ParseConfig(w.cfg.PostgresDSN)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(w.cfg.SourceAddr)
	if err != nil {
		return nil, fmt.Errorf("--source-addr %q: %w", w.cfg.SourceAddr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("--source-addr %q: %w", w.cfg.SourceAddr, err)
	}
	cc.Host, cc.Port, cc.Fallbacks = host, uint16(p), nil
	cc.ConnectTimeout = w.cfg.TTL
	cc.RuntimeParams["application_name"] = w.cfg.ID
	cc.RuntimeParams["idle_session_timeout"] = strconv.FormatInt(w.cfg.TTL.Milliseconds(), 10)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	for {
		qctx, cancel := context.WithTimeout(ctx, w.cfg.TTL)
		var won bool
		err := conn.QueryRow(qctx, "SELECT pg_try_advisory_lock(hashtext($1))", w.cfg.Fence).Scan(&won)
		if err == nil && won {
			var tok int64
			err = conn.QueryRow(qctx, pgTermRaise, w.cfg.Fence).Scan(&tok)
			cancel()
			if err != nil {
				conn.Close(context.Background())
				return nil, err
			}
			t := &pgTerm{conn: conn, token: tok, done: make(chan struct{})}
			go t.keep(w.cfg.TTL)
			return t, nil
		}
		cancel()
		if err != nil {
			conn.Close(context.Background())
			return nil, err
		}
		select {
		case <-ctx.Done():
			conn.Close(context.Background())
			return nil, ctx.Err()
		case <-time.After(w.cfg.TTL / 5):
		}
	}
}

// pgTerm is a leader's session: the term lasts while it answers.
type pgTerm struct {
	conn  *pgx.Conn
	token int64
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	err   error
}

func (t *pgTerm) Token() int64 { return t.token }

func (t *pgTerm) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// keep pings the session every ttl/4; a ping that fails, or is not
// answered within ttl, ends the term: the session, and so the lock, is
// gone or about to be.
func (t *pgTerm) keep(ttl time.Duration) {
	tick := time.NewTicker(ttl / 4)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), ttl)
		err := t.conn.Ping(ctx)
		cancel()
		if err != nil {
			t.mu.Lock()
			if t.err == nil {
				t.err = fmt.Errorf("postgres-term: lost the lock session: %w", err)
			}
			t.mu.Unlock()
			return
		}
	}
}

// Resign ends the session: the lock goes with it.
func (t *pgTerm) Resign(ctx context.Context) error {
	t.once.Do(func() { close(t.done) })
	t.mu.Lock()
	if t.err == nil {
		t.err = errors.New("postgres-term: resigned")
	}
	t.mu.Unlock()
	return t.conn.Close(ctx)
}
