package main

import (
	"context"
	"crypto/tls"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// With --protocol=resp the workers are unmodified Redis clients: go-redis
// connections through the replicas' RESP listeners (--redis-listen-addr),
// AUTH <fence> <token>. A connection keeps its token until the worker sees
// a new term of its own, then AUTHs again or is replaced (drawn, so both
// are exercised); a zombie goes on with its old connections and old token.
// Half the writes go in MULTI ... EXEC. In control mode the workers write
// straight to Redis (newWriter's control path), with no fence.

// respConn is one of a worker's dedicated connections and its token.
type respConn struct {
	conn  *goredis.Conn
	token int64
}

// respSender holds a worker's connections through the replicas' RESP
// listeners, round-robin.
type respSender struct {
	cfg     workerConfig
	clients []*goredis.Client
	next    atomic.Uint64

	mu   sync.Mutex
	idle []*respConn
	rng  *rand.Rand
}

// newRespSender returns the worker's RESP sender, over TLS with files
// when files.CA is set.
func newRespSender(cfg workerConfig, files tlsFiles) (*respSender, error) {
	if len(cfg.RespGateways) == 0 {
		return nil, errors.New("worker: --resp-gateways is required with --protocol=resp in fenced mode")
	}
	var tc *tls.Config
	if files.CA != "" {
		var err error
		if tc, err = files.config(); err != nil {
			return nil, errors.New("worker: TLS: " + err.Error())
		}
	}
	s := &respSender{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x7e5b))}
	for _, a := range cfg.RespGateways {
		s.clients = append(s.clients, goredis.NewClient(&goredis.Options{
			Addr: a, TLSConfig: tc,
			// Never resend: a write may have been applied before the
			// connection broke.
			MaxRetries: -1, DialTimeout: cfg.Timeout, ReadTimeout: cfg.Timeout, WriteTimeout: cfg.Timeout,
			PoolSize:                 64,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		}))
	}
	return s, nil
}

// Close closes the connections.
func (s *respSender) Close() {
	s.mu.Lock()
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, c := range idle {
		c.conn.Close()
	}
	for _, c := range s.clients {
		c.Close()
	}
}

func (s *respSender) take() *respConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.idle); n > 0 {
		c := s.idle[n-1]
		s.idle = s.idle[:n-1]
		return c
	}
	return nil
}

func (s *respSender) put(c *respConn) {
	s.mu.Lock()
	s.idle = append(s.idle, c)
	s.mu.Unlock()
}

func (s *respSender) coin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.IntN(2) == 0
}

// conn returns a connection authenticated with token.
func (s *respSender) conn(ctx context.Context, token int64) (*respConn, error) {
	c := s.take()
	if c != nil && c.token != token {
		if s.coin() {
			if err := c.conn.AuthACL(ctx, s.cfg.Fence, strconv.FormatInt(token, 10)).Err(); err == nil {
				c.token = token
				return c, nil
			}
		}
		c.conn.Close()
		c = nil
	}
	if c != nil {
		return c, nil
	}
	cl := s.clients[(s.next.Add(1)-1)%uint64(len(s.clients))]
	conn := cl.Conn()
	if err := conn.AuthACL(ctx, s.cfg.Fence, strconv.FormatInt(token, 10)).Err(); err != nil {
		conn.Close()
		return nil, err
	}
	return &respConn{conn: conn, token: token}, nil
}

// send writes req's commands with token, alone or in MULTI ... EXEC, and
// says what became of them.
func (s *respSender) send(ctx context.Context, token int64, req request) (Outcome, string) {
	c, err := s.conn(ctx, token)
	if err != nil {
		return respOutcome(err, false)
	}
	var cmds []goredis.Cmder
	if len(req.cmds) > 1 || s.coin() {
		cmds, err = c.conn.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			for _, cmd := range req.cmds {
				p.Do(ctx, anys(cmd)...)
			}
			return nil
		})
	} else {
		err = c.conn.Do(ctx, anys(req.cmds[0])...).Err()
	}
	if err == nil {
		for _, cmd := range cmds {
			if err = cmd.Err(); err != nil {
				break
			}
		}
	}
	out, reason := respOutcome(err, true)
	if out == Unknown {
		c.conn.Close()
	} else {
		s.put(c)
	}
	return out, reason
}

func anys(cmd []string) []any {
	out := make([]any, len(cmd))
	for i, a := range cmd {
		out[i] = a
	}
	return out
}

// respOutcome classifies a write's error; sent says the commands may have
// gone out. An error reply is a refusal named by its first word, unless
// fencegate says the outcome is unknown; anything else after sending
// (a lost connection, a timeout) leaves the outcome unknown.
func respOutcome(err error, sent bool) (Outcome, string) {
	var rerr goredis.Error
	switch {
	case err == nil:
		return Acked, ""
	case errors.As(err, &rerr):
		msg := rerr.Error()
		reason, _, _ := strings.Cut(msg, " ")
		if strings.Contains(msg, "(outcome unknown)") {
			return Unknown, reason + " (outcome unknown)"
		}
		return Refused, reason
	case tlsRefused(err.Error()):
		return Refused, reasonTLSRefused
	case !sent:
		return Refused, reasonLost + " before sending"
	}
	return Unknown, reasonLost + " (outcome unknown)"
}
