package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fencegate/fencegate/proxy/coalesce"
	"github.com/fencegate/fencegate/tokens"
)

// Backend is fencegate's Redis backend: a connection pool that runs fenced
// writes. It is safe for concurrent use.
type Backend struct {
	client *goredis.Client
	addr   string
	cfg    Config
	allow  allowlist
	// The limits as script arguments, boxed once so a write does not
	// allocate them, and the same for each fence's token key and token.
	maxValueArg, maxReplyArg any
	args                     fenceArgs
	// co runs writes in batches, one per connection slot.
	co *coalesce.Coalescer[*call]
	// recheck decides again on each write's token as it is about to be
	// sent (SetSendCheck).
	recheck coalesce.Recheck
	// evicts is the refusal of every write while the server's
	// maxmemory-policy may evict the high-water marks, as last read
	// (watchEviction); nil while it may not.
	evicts atomic.Pointer[string]
	stop   context.CancelFunc
	done   chan struct{}
}

// CheckAddr refuses TLS to a Unix socket: Redis serves TLS on its TCP
// ports only, so the handshake could never succeed. An address is a Unix
// socket when it is an absolute path, as go-redis reads it (and redis-cli
// -s takes it).
func CheckAddr(addr string, tls *tls.Config) error {
	if tls != nil && strings.HasPrefix(addr, "/") {
		return fmt.Errorf("redis: %s is a Unix socket, and TLS is configured: Redis serves TLS on TCP ports only", addr)
	}
	return nil
}

// Open connects to the Redis server at addr (host:port, or the absolute
// path of its Unix socket) and checks that it answers PING. The error is
// one line naming addr. Cancelling ctx aborts the check.
func Open(ctx context.Context, addr string, cfg Config) (*Backend, error) {
	b, err := newBackend(addr, cfg)
	if err != nil {
		return nil, err
	}
	cfg = b.cfg
	if err := CheckAddr(addr, cfg.TLS); err != nil {
		return nil, err
	}
	b.client = goredis.NewClient(&goredis.Options{
		Addr: addr, // host:port, or a Unix socket's path (go-redis: a leading /)
		// RESP2: a script's nil is a nil reply, not a RESP3 boolean.
		Protocol: 2,
		// Never resend a write: after a lost connection the script may
		// have run, and running it twice would apply it twice.
		MaxRetries:  -1,
		DialTimeout: cfg.DialTimeout,
		// One attempt per call: a write waits for one DialTimeout at most.
		DialerRetries:         1,
		ReadTimeout:           cfg.ReadTimeout,
		WriteTimeout:          cfg.WriteTimeout,
		ContextTimeoutEnabled: true,
		PoolSize:              cfg.PoolSize,
		TLSConfig:             cfg.TLS,
		Username:              cfg.Username,
		Password:              cfg.Password,
		DisableIdentity:       true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	})
	b.co = coalesce.New(cfg.PoolSize, maxBatch, b.runBatch)
	if err := b.Ping(ctx); err != nil {
		_ = b.client.Close()
		return nil, fmt.Errorf("redis: cannot reach %s: %w%s", addr, oneLine(err), resetHint(cfg, err))
	}
	if err := b.checkACL(ctx); err != nil {
		_ = b.client.Close()
		return nil, err
	}
	if err := b.checkEviction(ctx); err != nil {
		_ = b.client.Close()
		return nil, err
	}
	wctx, stop := context.WithCancel(context.Background())
	b.stop, b.done = stop, make(chan struct{})
	go b.watchEviction(wctx)
	return b, nil
}

// watchEviction reads the server's maxmemory-policy every
// cfg.EvictionCheck until ctx ends: Redis's policy may be changed at run
// time (CONFIG SET), and while it is allkeys-* every write is refused
// (Exec) and Ping fails, naming it, so that /readyz says why. A policy
// that cannot be read leaves the last answer.
func (b *Backend) watchEviction(ctx context.Context) {
	defer close(b.done)
	t := time.NewTicker(b.cfg.EvictionCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, b.cfg.ReadTimeout)
		policy, err := b.evictionPolicy(cctx)
		cancel()
		switch {
		case err != nil:
		case strings.HasPrefix(policy, "allkeys-"):
			msg := b.evictsMsg(policy)
			b.evicts.Store(&msg)
		default:
			b.evicts.Store(nil)
		}
	}
}

// evictsMsg says why a server with policy, which evicts any key, is
// refused.
func (b *Backend) evictsMsg(policy string) string {
	return fmt.Sprintf("%s evicts any key when full (maxmemory-policy %s): fences' high-water marks could be evicted and stale tokens accepted; use noeviction or a volatile-* policy",
		b.addr, policy)
}

// evictionPolicy reads the server's maxmemory-policy (INFO memory).
func (b *Backend) evictionPolicy(ctx context.Context) (string, error) {
	info, err := b.client.Info(ctx, "memory").Result()
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(info) {
		if policy, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
			return policy, nil
		}
	}
	return "", nil
}

// checkEviction fails when Redis may evict any key once full
// (maxmemory-policy allkeys-*): a fence's high-water mark, a key with no
// expiry, would go with the rest, and a stale token would then be
// accepted. A writer of another fence could make that happen by filling
// Redis. noeviction and the volatile-* policies, which evict only keys
// with an expiry, keep the marks. Redis's policy may be changed at run
// time: keep it so (docs/SECURITY.md).
func (b *Backend) checkEviction(ctx context.Context) error {
	policy, err := b.evictionPolicy(ctx)
	if err != nil {
		return fmt.Errorf("redis: cannot read the maxmemory-policy of %s (INFO memory: %w); fencegate needs it to know its high-water marks cannot be evicted: grant its user +info (docs/SECURITY.md)",
			b.addr, oneLine(err))
	}
	if strings.HasPrefix(policy, "allkeys-") {
		return errors.New("redis: " + b.evictsMsg(policy))
	}
	return nil
}

// aclScript lists the commands of the fenced write's own bookkeeping that
// the user may not run. Redis aborts a script at a refused redis.call but
// keeps what it wrote before: without RESTORE, say, a failed write would
// stay half applied instead of rolled back. The caller's commands run
// through pcall, so a refused one is rolled back like any failure.
const aclScript = `
local missing = {}
local function check(...)
  if not redis.acl_check_cmd(...) then
    missing[#missing + 1] = (...)
  end
end
local k = KEYS[1]
check('GET', k)
check('SET', k, '1')
check('DUMP', k)
check('PEXPIRETIME', k)
check('RESTORE', k, '0', 'x', 'REPLACE', 'ABSTTL')
check('DEL', k)
check('STRLEN', k)
check('HGET', k, 'f')
return missing
`

// checkACL fails when the Redis user may not run what every fenced write
// needs (see aclScript), naming the commands.
func (b *Backend) checkACL(ctx context.Context) error {
	user := b.cfg.Username
	if user == "" {
		user = "default"
	}
	res, err := b.client.Eval(ctx, aclScript, []string{TokenKey("acl-check")}).StringSlice()
	if err != nil {
		return fmt.Errorf("redis: checking the ACL of user %q on %s: %w", user, b.addr, oneLine(err))
	}
	if len(res) > 0 {
		return fmt.Errorf("redis: user %q on %s may not run %s, which every fenced write needs (grant the ACL in docs/SECURITY.md)",
			user, b.addr, strings.Join(res, ", "))
	}
	return nil
}

// resetHint guesses why the server dropped the connection: a TLS-only
// server resets plain connections, and one that requires a client
// certificate may reset the connection before its alert is read.
func resetHint(cfg Config, err error) string {
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		return ""
	}
	switch {
	case cfg.TLS == nil:
		return " (is it a TLS port? none is configured)"
	case len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetClientCertificate == nil:
		return " (does it require a client certificate? none is configured)"
	}
	return ""
}

// newBackend returns a Backend with its checked config and allowlist, not
// yet connected.
func newBackend(addr string, cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	allow, err := newAllowlist(cfg.Allow)
	if err != nil {
		return nil, err
	}
	return &Backend{
		addr: addr, cfg: cfg, allow: allow,
		maxValueArg: strconv.Itoa(cfg.MaxValueBytes),
		maxReplyArg: strconv.Itoa(cfg.MaxReplyBytes),
	}, nil
}

// oneLine keeps an error on one line.
func oneLine(err error) error {
	if msg := err.Error(); strings.ContainsAny(msg, "\r\n") {
		return errors.New(strings.Join(strings.Fields(msg), " "))
	}
	return err
}

// Close closes the connections. Calls in progress fail.
func (b *Backend) Close() error {
	if b.stop == nil {
		return b.client.Close()
	}
	// The connections first: a read of the eviction watch waiting on a
	// server that does not answer fails at once, where the end of its
	// context alone would not cut it short.
	b.stop()
	err := b.client.Close()
	<-b.done
	return err
}

// Stats returns counts of the batches of writes since Open: each batch is
// one round trip.
func (b *Backend) Stats() coalesce.Stats { return b.co.Stats() }

// Addr returns the host:port the backend connects to.
func (b *Backend) Addr() string { return b.addr }

// Ping checks that the server answers, and that its maxmemory-policy,
// as last read, keeps the high-water marks.
func (b *Backend) Ping(ctx context.Context) error {
	if msg := b.evicts.Load(); msg != nil {
		return errors.New(*msg)
	}
	return b.client.Ping(ctx).Err()
}

// HighWater returns the fence's high-water mark and whether the fence
// exists.
func (b *Backend) HighWater(ctx context.Context, fence string) (tokens.Token, bool, error) {
	v, err := b.client.Get(ctx, TokenKey(fence)).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("redis: read fence %q on %s: %w", fence, b.addr, err)
	}
	t, err := tokens.Parse(v)
	if err != nil {
		return 0, false, fmt.Errorf("redis: fence %q on %s holds %q, not a token", fence, b.addr, v)
	}
	return t, true, nil
}

// Fences returns every fence, ordered by name. It walks the keyspace with
// SCAN, so it costs time in proportion to the whole database, and a fence
// created during the walk may be missing. Token keys holding anything but
// a token are left out.
func (b *Backend) Fences(ctx context.Context) ([]Fence, error) {
	var names, keys []string
	iter := b.client.Scan(ctx, 0, reservedPrefix+"{*}:token", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		name, ok := strings.CutPrefix(key, reservedPrefix+"{")
		if !ok {
			continue
		}
		if name, ok = strings.CutSuffix(name, "}:token"); !ok || strings.ContainsAny(name, "{}") {
			continue
		}
		names = append(names, name)
		keys = append(keys, key)
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("redis: list fences on %s: %w", b.addr, err)
	}
	fences := make([]Fence, 0, len(keys))
	if len(keys) == 0 {
		return fences, nil
	}
	// One GET each, pipelined: in a cluster the keys are in many slots.
	cmds, err := b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, k := range keys {
			p.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("redis: list fences on %s: %w", b.addr, err)
	}
	for i, c := range cmds {
		v, err := c.(*goredis.StringCmd).Result()
		if errors.Is(err, goredis.Nil) {
			continue // deleted since the scan
		}
		if err != nil {
			return nil, fmt.Errorf("redis: list fences on %s: %w", b.addr, err)
		}
		t, err := tokens.Parse(v)
		if err != nil {
			continue // not a token: no fence (Exec refuses to use it)
		}
		fences = append(fences, Fence{Name: names[i], HighWater: t})
	}
	sort.Slice(fences, func(i, j int) bool { return fences[i].Name < fences[j].Name })
	// SCAN may return a key twice.
	out := fences[:0]
	for i, f := range fences {
		if i == 0 || f.Name != fences[i-1].Name {
			out = append(out, f)
		}
	}
	return out, nil
}

// parseToken parses a high-water mark the script returned.
func parseToken(v any) tokens.Token {
	s, _ := v.(string)
	n, _ := strconv.ParseUint(s, 10, 64)
	return tokens.Token(n)
}

// resetScript lowers the token key KEYS[1] to ARGV[1] ("0" deletes it)
// when it holds a higher mark, and returns the mark it held ("0": none).
// Marks are compared as canonical decimals: longer is larger.
var resetScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return '0' end
local new = ARGV[1]
if new == '0' then
  redis.call('DEL', KEYS[1])
elseif #new < #cur or (#new == #cur and new < cur) then
  redis.call('SET', KEYS[1], new)
end
return cur
`)

// Reset lowers the fence's high-water mark to mark (0 forgets the fence),
// and returns the mark it had (0: no such fence). A mark at or above the
// current one changes nothing.
func (b *Backend) Reset(ctx context.Context, fence string, mark tokens.Token) (tokens.Token, error) {
	v, err := resetScript.Run(ctx, b.client, []string{TokenKey(fence)}, mark.String()).Text()
	if err != nil {
		return 0, fmt.Errorf("redis: reset fence %q on %s: %w", fence, b.addr, err)
	}
	if v == "0" {
		return 0, nil
	}
	old, err := tokens.Parse(v)
	if err != nil {
		return 0, fmt.Errorf("redis: fence %q on %s held %q, not a token", fence, b.addr, v)
	}
	return old, nil
}
