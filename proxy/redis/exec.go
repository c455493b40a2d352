package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/proxy/coalesce"
	"github.com/fencegate/fencegate/tokens"
)

// Exec runs a fenced write: in one Lua script, it checks token t against
// the fence's high-water mark, runs cmds in order and raises the mark to t.
// One round trip (EVALSHA; EVAL once more if the server lost the script).
// Either every command is applied or none is. Writes that arrive while
// every connection slot is busy share the next free slot's round trip, in
// one pipeline, each its own script run.
//
// cmds are commands as argument lists, the name first (any case), e.g.
// {"SET", "{jobs}:last", "7"}; every key must carry the fence's hash tag
// (see the package doc). The replies are JSON-friendly: string for bulk and
// status replies ("OK"), int64 (exact over its whole range), nil, and []any
// for arrays.
//
// Refusals are *tokens.RefusalError with Fence and Token set:
// COMMAND_NOT_ALLOWED or INVALID_REQUEST (metadata "command": the 0-based
// index, and "limit" for a size limit) before anything is sent;
// STALE_TOKEN with HighWater when t is below the fence's high-water mark;
// STATEMENT_FAILED with metadata "command" and "error" (Redis's error
// text) when a command failed, or "command" and "limit" when the script
// found a limit exceeded, and the write was rolled back (or, for a written
// key whose expiry is too far to snapshot exactly, never run: "limit"
// "exact expiry"), or "command" and "permission" when fencegate's Redis
// user may not run on that command's key what the script would run
// itself (STRLEN, GET, HGET, RESTORE or DEL; nothing written; "error" is
// only ever Redis's own error text); BACKEND_UNAVAILABLE when the server
// could not be reached or did not answer in time, with metadata
// "outcome": "unknown" when the script may have run all the same, and,
// before anything is sent, while the server's maxmemory-policy may evict
// the high-water marks (Config.EvictionCheck), or, nothing written, with
// metadata "permission": "SET" when the user may not set the fence's
// token key. Cancelling ctx aborts the wait; after the script was sent
// that is BACKEND_UNAVAILABLE with an unknown outcome.
func (b *Backend) Exec(ctx context.Context, fence string, t tokens.Token, cmds [][]string) ([]any, error) {
	if msg := b.evicts.Load(); msg != nil {
		return nil, &tokens.RefusalError{Reason: tokens.ReasonBackendUnavailable, Fence: fence, Token: t, Msg: *msg}
	}
	c := calls.Get().(*call)
	if r := b.planOf(&c.plan, fence, t, cmds); r != nil {
		c.release()
		return nil, r
	}
	c.fence, c.token = fence, t
	c.Init(ctx)
	if o := b.co.Do(c); o != coalesce.Finished {
		if o == coalesce.Abandoned {
			c.release() // never sent; an Orphaned call's batch still finishes it
		}
		return nil, coalesce.Refusal(o, fence, t, b.addr, ctx.Err())
	}
	res, err := c.res, c.err
	c.release()
	if r, ok := err.(*tokens.RefusalError); ok { //nolint:errorlint // refused sets the send check's own refusal, unwrapped
		return nil, r
	}
	if err != nil {
		return nil, b.unavailable(fence, t, err)
	}
	return b.reply(fence, t, cmds, res)
}

// planOf checks a write into p, empty, and lays it out for its script
// (leaseScript for a fence of a Redis lease).
func (b *Backend) planOf(p *plan, fence string, t tokens.Token, cmds [][]string) *tokens.RefusalError {
	r := b.check(p, fence, t, cmds)
	if r != nil {
		return r
	}
	if p.leaseHere {
		p.withLease(p.leaseKeys)
	}
	p.seal()
	return nil
}

// maxBatch bounds the writes sent in one round trip.
const maxBatch = 16

// call is one fenced write on its way through a batch. Exec takes calls
// from the pool and puts them back with their buffers, except one its
// caller left in a batch (coalesce.Orphaned), which the batch still uses.
type call struct {
	coalesce.Call
	fence string
	token tokens.Token
	plan  plan

	// Set by the batch before Finish.
	res any
	err error
}

var calls = sync.Pool{New: func() any { return new(call) }}

// release empties c and puts it back in the pool.
func (c *call) release() {
	c.plan.reset()
	c.fence, c.res, c.err = "", nil, nil
	calls.Put(c)
}

// runBatch runs the scripts of calls: a lone write as EVALSHA (EVAL when
// the server lost the script), several in one pipeline, one round trip for
// all. Each is its own script run, atomic on its own; Redis runs them one
// after the other as it would from separate connections.
func (b *Backend) runBatch(calls []*call) {
	ctx, cancel := coalesce.BatchContext(calls)
	defer cancel()
	if calls = coalesce.Sift(&b.recheck, calls); len(calls) == 0 {
		return
	}
	if len(calls) == 1 {
		c := calls[0]
		c.res, c.err = b.client.Do(ctx, c.plan.cmd...).Result()
		if isNoScript(c.err) {
			b.eval(ctx, c)
		}
		c.Finish()
		return
	}
	pipe := b.client.Pipeline()
	cmds := make([]*goredis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.Do(ctx, c.plan.cmd...)
	}
	// Each command carries its own error; Exec's is the first of them.
	_, _ = pipe.Exec(ctx)
	var lost []*call
	for i, c := range calls {
		res, err := cmds[i].Result()
		if isNoScript(err) {
			// Not run; EVAL loads the script and runs it.
			lost = append(lost, c)
			continue
		}
		c.res, c.err = res, err
		c.Finish()
	}
	for _, c := range lost {
		b.eval(ctx, c)
		c.Finish()
	}
}

// SetSendCheck has the backend ask f, as each write is about to be sent,
// whether its token may still write: one that waited in the queue while
// its term ended is refused with f's answer, nothing sent. The gateway
// that owns the backend sets it.
func (b *Backend) SetSendCheck(f coalesce.SendCheck) { b.recheck.Set(f) }

// Fenced returns the write's fence and token (coalesce.Sendable).
func (c *call) Fenced() (string, tokens.Token) { return c.fence, c.token }

// Refuse finishes the call with r, nothing sent (coalesce.Sendable).
func (c *call) Refuse(r *tokens.RefusalError) {
	c.err = r
	c.Finish()
}

// eval runs c's script with EVAL, which loads it: for a server that lost
// it (NOSCRIPT), as go-redis's Script.Run does.
func (b *Backend) eval(ctx context.Context, c *call) {
	cmd := slices.Clone(c.plan.cmd)
	cmd[0], cmd[1] = "eval", fenceScript
	if c.plan.lease {
		cmd[1] = leaseSource
	}
	c.res, c.err = b.client.Do(ctx, cmd...).Result()
}

func isNoScript(err error) bool {
	if err == nil {
		return false
	}
	var rerr goredis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOSCRIPT")
}

// reply turns the script's reply to a write of cmds into its outcome.
func (b *Backend) reply(fence string, t tokens.Token, cmds [][]string, res any) ([]any, error) {
	n := len(cmds)
	reply, ok := res.([]any)
	if !ok || len(reply) == 0 {
		return nil, b.unexpected(fence, t, res)
	}
	marker, _ := reply[0].(int64)
	switch {
	case marker == replyOK && (len(reply) == n+1 || len(reply) == n+2):
		out := reply[1 : n+1]
		for i, v := range out {
			out[i] = jsonValue(v)
		}
		var exact []any
		if len(reply) == n+2 {
			if exact, ok = reply[n+1].([]any); !ok {
				break
			}
		}
		// Integers the script could not pass exactly through Lua come as
		// the decimal strings Redis holds.
		for _, e := range exact {
			i, _ := e.(int64)
			if i < 0 || int(i) >= len(out) {
				return nil, b.unexpected(fence, t, res)
			}
			s, _ := out[i].(string)
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, b.unexpected(fence, t, res)
			}
			out[i] = v
		}
		return out, nil
	case marker == replyStale && len(reply) == 2:
		r := tokens.Refuse(tokens.ReasonStaleToken, fence, t, "token %d is below the fence's high-water mark %v", t, reply[1])
		r.HighWater = parseToken(reply[1])
		return nil, r
	case marker == replyFailed && len(reply) == 3:
		i, _ := reply[1].(int64)
		text, _ := reply[2].(string)
		r := refuseCommand(tokens.ReasonStatementFailed, fence, t, int(i), "%s (rolled back)", text)
		r.Metadata["error"] = text
		return nil, r
	case marker == replyLimit && len(reply) == 4:
		i, _ := reply[1].(int64)
		limit, _ := reply[2].(string)
		size, _ := reply[3].(int64)
		switch limit {
		case limitExpiry:
			k, _ := reply[3].(string)
			return nil, refuseLimit(tokens.ReasonStatementFailed, fence, t, int(i), "exact expiry",
				"the expiry of key %q is 2^53 ms or more after the Unix epoch, beyond what the script can snapshot exactly for a rollback (nothing written)", k)
		case limitValue:
			return nil, refuseLimit(tokens.ReasonStatementFailed, fence, t, int(i), "MaxValueBytes",
				"the value would grow to %d bytes, over the limit of %d (rolled back)", size, b.cfg.MaxValueBytes)
		case limitReply:
			return nil, refuseLimit(tokens.ReasonStatementFailed, fence, t, int(i), "MaxReplyBytes",
				"the replies up to this command are %d bytes, over the limit of %d (rolled back)", size, b.cfg.MaxReplyBytes)
		case limitInteger:
			return nil, refuseLimit(tokens.ReasonStatementFailed, fence, t, int(i), "exact integers",
				"the reply is an integer beyond ±2^53, which cannot pass exactly through the script (rolled back)")
		}
	case marker == replyDenied && len(reply) == 4:
		i, _ := reply[1].(int64)
		name, _ := reply[2].(string)
		k, _ := reply[3].(string)
		return nil, b.denied(fence, t, cmds, int(i), name, k)
	case marker == replyLeaseStale && len(reply) == 2:
		r := tokens.Refuse(tokens.ReasonStaleToken, fence, t, "token %d is below the current term %v", t, reply[1])
		r.Term = parseToken(reply[1])
		return nil, r
	case marker == replyLeaseUnknown && len(reply) == 2:
		r := tokens.Refuse(tokens.ReasonUnknownTerm, fence, t, "no leader of election %q ever held term %d", fence, t)
		r.Term = parseToken(reply[1])
		return nil, r
	case marker == replyLeaseEnded && len(reply) == 2:
		return nil, tokens.Refuse(tokens.ReasonTermEnded, fence, t, "term %d of election %q is over and no leader holds it", t, fence)
	case marker == replyLeaseCorrupt && len(reply) == 2:
		lk, _ := b.cfg.Leases(fence)
		return nil, tokens.Refuse(tokens.ReasonBackendUnavailable, fence, t,
			"key %s on %s holds %q, not a token; nothing written", lk.Counter, b.addr, reply[1])
	case marker == replyCorrupt && len(reply) == 2:
		return nil, tokens.Refuse(tokens.ReasonBackendUnavailable, fence, t,
			"key %s on %s holds %q, not a token; nothing written", TokenKey(fence), b.addr, reply[1])
	}
	return nil, b.unexpected(fence, t, res)
}

// denied is the refusal of a write that the script did not run because
// fencegate's Redis user may not run name on key (replyDenied), which the
// script would run itself: nothing was written. A data key's refusal names
// the command it is for (metadata "command", the first that writes key
// when i < 0), so that a pipeline's other commands can still be answered,
// and "permission": name. It is fencegate's refusal, not an error Redis
// sent: there is no metadata "error".
func (b *Backend) denied(fence string, t tokens.Token, cmds [][]string, i int, name, key string) *tokens.RefusalError {
	var why string
	switch name {
	case "SET":
		// The token key: every write that raises the mark needs it.
		r := tokens.Refuse(tokens.ReasonBackendUnavailable, fence, t,
			"fencegate's Redis user may not SET key %q on %s, which raising the fence's high-water mark needs (nothing written; grant it, docs/SECURITY.md)", key, b.addr)
		r.Metadata = map[string]string{"permission": name}
		return r
	case "RESTORE", "DEL":
		i = b.writerOf(cmds, key)
		why = "rolling this write back would need"
	case "STRLEN":
		why = "weighing APPEND against MaxValueBytes needs"
	default: // GET, HGET
		why = "reading the command's reply back exactly past 2^53 needs"
	}
	const format = "fencegate's Redis user may not %s key %q, which %s (nothing written; grant it, docs/SECURITY.md)"
	var r *tokens.RefusalError
	if i >= 0 && i < len(cmds) {
		r = refuseCommand(tokens.ReasonStatementFailed, fence, t, i, format, name, key, why)
	} else {
		r = tokens.Refuse(tokens.ReasonStatementFailed, fence, t, format, name, key, why)
		r.Metadata = map[string]string{}
	}
	r.Metadata["permission"] = name
	return r
}

// unexpected is a reply the script cannot have given: someone else's
// script under our SHA, or a bug. The write may have been applied.
func (b *Backend) unexpected(fence string, t tokens.Token, res any) *tokens.RefusalError {
	r := tokens.Refuse(tokens.ReasonBackendUnavailable, fence, t, "unexpected reply from %s: %.200v", b.addr, res)
	r.Metadata = map[string]string{"outcome": "unknown"}
	return r
}

// notRunPrefixes are error replies with which Redis refuses to run a script
// at all: the write was not applied.
var notRunPrefixes = []string{
	"LOADING", "BUSY", "OOM", "READONLY", "MASTERDOWN", "NOREPLICAS", "MISCONF",
	"NOSCRIPT", "NOAUTH", "NOPERM", "WRONGPASS", "CLUSTERDOWN", "MOVED", "ASK",
	"TRYAGAIN", "CROSSSLOT",
}

// unavailable turns an error of the script call into its refusal.
func (b *Backend) unavailable(fence string, t tokens.Token, err error) *tokens.RefusalError {
	r := &tokens.RefusalError{Reason: tokens.ReasonBackendUnavailable, Fence: fence, Token: t, Err: err}
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range notRunPrefixes {
			if strings.HasPrefix(msg, p+" ") || msg == p {
				r.Msg = b.addr + " refused the write"
				return r
			}
		}
		// An error raised by the script itself, e.g. a failed rollback:
		// commands before it may stay applied.
		r.Msg = "the write failed on " + b.addr
		r.Metadata = map[string]string{"outcome": "unknown"}
		return r
	}
	if notSent(err) {
		r.Msg = "cannot reach " + b.addr
		return r
	}
	r.Msg = "lost " + b.addr + " during the write"
	if isTimeout(err) {
		r.Msg += ": timed out"
	}
	r.Metadata = map[string]string{"outcome": "unknown"}
	return r
}

// notSent reports whether err happened before the script was sent: no
// connection could be made or taken from the pool, or the client is closed.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, goredis.ErrClosed) || errors.Is(err, goredis.ErrPoolTimeout)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// jsonValue turns a RESP2 reply into string, int64, nil or []any.
func jsonValue(v any) any {
	switch v := v.(type) {
	case []any:
		for i, e := range v {
			v[i] = jsonValue(e)
		}
		return v
	case string, int64, nil:
		return v
	case error:
		return v.Error()
	default:
		return fmt.Sprint(v)
	}
}

// Command returns the command Exec sends for a write of cmds with token t,
// as its arguments: EVALSHA, the script's SHA1, the number of keys, the
// keys and the script's arguments. It is for tools that send the same
// fenced write themselves (fencebench's redis-twemproxy-fenced path sends
// it through nutcracker). The script must be in the server's script cache,
// where an Exec against the server puts it. Its refusals are Exec's before
// anything is sent.
func (b *Backend) Command(fence string, t tokens.Token, cmds [][]string) ([]string, error) {
	var p plan
	if r := b.planOf(&p, fence, t, cmds); r != nil {
		return nil, r
	}
	out := make([]string, len(p.cmd))
	for i, a := range p.cmd {
		out[i] = fmt.Sprint(a)
	}
	out[0] = "EVALSHA"
	return out, nil
}
