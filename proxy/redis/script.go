package redis

import goredis "github.com/redis/go-redis/v9"

// Markers leading the script's reply.
const (
	replyStale   = 0 // {0, high-water}: nothing written
	replyOK      = 1 // {1, reply, ..., reply[, exact]}: applied
	replyFailed  = 2 // {2, command index, error text}: rolled back
	replyCorrupt = 3 // {3, stored value}: the token key holds no token
	replyLimit   = 4 // {4, command index, limit, bytes or key}: rolled back, or nothing run

	// The lease check's (leaseScript), before anything is written.
	replyLeaseStale   = 5 // {5, counter}: a later lease holder's token exists
	replyLeaseUnknown = 6 // {6, counter or nil}: the token was never handed out
	replyLeaseEnded   = 7 // {7, counter}: the token's lease is gone
	replyLeaseCorrupt = 8 // {8, stored value}: the counter holds no token

	// replyDenied: {9, command index or -1, command, key}, nothing
	// written: the user may not run command on key, which the script
	// would run itself (see fenceScript); -1 for a key of no one command
	// (a written key's rollback, the token key's SET).
	replyDenied = 9
)

// Limits the script enforces, named in a replyLimit reply.
const (
	limitValue   = "value"   // APPEND would grow a string over MaxValueBytes
	limitReply   = "reply"   // the replies so far are over MaxReplyBytes
	limitInteger = "integer" // an integer reply beyond ±2^53, not exact in Lua
	limitExpiry  = "expiry"  // a written key expires 2^53 ms or more after the epoch
)

// fenceScript is the fenced write. KEYS[1] is the token key, then the
// keys the commands may write, then the keys they only read (declared for
// Redis Cluster). ARGV[1] is the token in canonical decimal, ARGV[2] the
// number of written keys to snapshot (KEYS[2] to KEYS[1+ARGV[2]]: all the
// written keys, or none for a write that cannot fail after writing, see
// oneStepCommands), ARGV[3] MaxValueBytes,
// ARGV[4] MaxReplyBytes, ARGV[5] "1" when a command is in probedCommands,
// then each command as its argument count, its upper-case name and its
// arguments.
//
// The token is compared as a decimal string (longer is larger, then byte
// by byte): Lua numbers are doubles and tokens go up to 2^64-1. A mark
// equal to the token (every write of a leader after its first) skips the
// validation and the comparison: the token is canonical decimal, checked
// before the script is called, and Lua compares interned strings in
// constant time. Redis's time per script run for such a write, medians of
// five runs of INFO commandstats under redis-benchmark -P 16 -c 4: 11.4 →
// 9.2 µs with a 9-digit token, 11.1 → 10.3 µs with a 4-digit one.
//
// Redis does not undo a script's earlier writes when a later command
// fails, so every written key is snapshotted (DUMP, PEXPIRETIME) before
// the first command runs and restored (RESTORE ... REPLACE ABSTTL, or DEL
// if it did not exist) when one fails or a limit is hit. The expiry is
// kept as the absolute time: a remaining PTTL can read 0 for a key still
// alive (Redis 7.0 times PTTL by the clock, a script sees keys as of its
// start), and RESTORE with ttl 0 would make it permanent; an expiry
// already past when restored deletes the key, as it would have expired.
// An expiry 2^53 ms or more after the epoch reaches Lua inexact (a double)
// and would make RESTORE fail half-way, so such a key refuses the write
// before any command runs ({4, 0, 'expiry', key}).
//
// Redis aborts a script at a redis.call its ACL refuses and keeps what the
// script wrote before, and an ACL may differ by key (selectors), which
// Open's check on fencegate's own key cannot see. So before anything is
// written the script asks redis.acl_check_cmd about every command it runs
// itself after a write: RESTORE and DEL of each snapshotted key, SET of
// the token key when the mark is to be raised, and, only for a write with
// a probedCommands command, STRLEN of APPEND's key and GET (HGET) of the
// INCR family's (HINCRBY's). A refusal is {9, ...}, nothing written.
//
// The token key is only set after every command succeeded, and only when
// the token is not already the mark (a leader's every write after its
// first leaves it as it is); commands cannot name it (check refuses the
// fencegate: prefix). A script runs atomically, so no client sees the
// intermediate state.
//
// Limits: APPEND is weighed (STRLEN) before it runs, and a STRLEN that
// fails (WRONGTYPE) fails the write; each reply is weighed after its
// command ran, so the script never returns more than MaxReplyBytes.
// Integer replies reach Lua as doubles: one beyond ±2^53 may have been
// rounded, so the INCR family's is read back as the decimal string the
// key now holds (its index listed in a last element after the replies,
// for the caller to parse), and any other refuses the write.
//
// The shebang (Redis 7) makes the server refuse the script up front when it
// is over maxmemory, instead of failing a command half-way.
const fenceScript = `#!lua
local token = ARGV[1]
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= token then
  if #cur > 20 or not string.match(cur, '^[1-9][0-9]*$') then
    return {3, string.sub(cur, 1, 64)}
  end
  local stale = #token < #cur
  if #token == #cur then
    for i = 1, #token do
      local a, b = string.byte(token, i), string.byte(cur, i)
      if a ~= b then
        stale = a < b
        break
      end
    end
  end
  if stale then
    return {0, cur}
  end
end

if cur ~= token and not redis.acl_check_cmd('SET', KEYS[1], token) then
  return {9, -1, 'SET', KEYS[1]}
end
if ARGV[5] == '1' then
  local pos, n = 6, 0
  while pos <= #ARGV do
    local name, k = ARGV[pos + 1], ARGV[pos + 2]
    local probe
    if name == 'APPEND' then
      probe = 'STRLEN'
    elseif name == 'INCR' or name == 'INCRBY' or name == 'DECR' or name == 'DECRBY' then
      probe = 'GET'
    elseif name == 'HINCRBY' then
      if not redis.acl_check_cmd('HGET', k, ARGV[pos + 3]) then
        return {9, n, 'HGET', k}
      end
    end
    if probe and not redis.acl_check_cmd(probe, k) then
      return {9, n, probe, k}
    end
    pos = pos + tonumber(ARGV[pos]) + 1
    n = n + 1
  end
end

local nw = tonumber(ARGV[2])
local maxValue = tonumber(ARGV[3])
local maxReply = tonumber(ARGV[4])
local exactLimit = 9007199254740992 -- 2^53
local dumps, expiries = {}, {}
for i = 2, nw + 1 do
  if not redis.acl_check_cmd('RESTORE', KEYS[i], '0', 'x', 'REPLACE', 'ABSTTL') then
    return {9, -1, 'RESTORE', KEYS[i]}
  end
  if not redis.acl_check_cmd('DEL', KEYS[i]) then
    return {9, -1, 'DEL', KEYS[i]}
  end
  local d = redis.call('DUMP', KEYS[i])
  dumps[i] = d
  if d then
    local at = redis.call('PEXPIRETIME', KEYS[i])
    if at >= exactLimit then
      return {4, 0, 'expiry', KEYS[i]}
    end
    expiries[i] = at
  end
end

local out, exact, fail = {1}, nil, nil
local pos, n, total = 6, 0, 0
while pos <= #ARGV do
  local argc = tonumber(ARGV[pos])
  local name = ARGV[pos + 1]
  if name == 'APPEND' then
    local len = redis.pcall('STRLEN', ARGV[pos + 2])
    if type(len) ~= 'number' then
      fail = {2, n, type(len) == 'table' and len.err or 'ERR STRLEN failed'}
      break
    end
    if len + #ARGV[pos + 3] > maxValue then
      fail = {4, n, 'value', len + #ARGV[pos + 3]}
      break
    end
  end
  local reply = redis.pcall(unpack(ARGV, pos + 1, pos + argc))
  if type(reply) == 'table' and reply.err then
    fail = {2, n, reply.err}
    break
  end
  if type(reply) == 'number' and (reply >= exactLimit or reply <= -exactLimit) then
    if name == 'INCR' or name == 'INCRBY' or name == 'DECR' or name == 'DECRBY' then
      reply = redis.call('GET', ARGV[pos + 2])
    elseif name == 'HINCRBY' then
      reply = redis.call('HGET', ARGV[pos + 2], ARGV[pos + 3])
    else
      fail = {4, n, 'integer', 0}
      break
    end
    exact = exact or {}
    exact[#exact + 1] = n
  end
  -- Weigh the reply as MaxReplyBytes counts it: the bytes of its strings
  -- plus 16 per array element. The common replies inline: a function
  -- made on every run costs the script more than all the rest here.
  local t = type(reply)
  if t == 'string' then
    total = total + #reply
  elseif t == 'table' and reply.ok then
    total = total + #reply.ok
  elseif t == 'table' then
    local function size(v)
      if type(v) ~= 'table' then
        return type(v) == 'string' and #v or 8
      end
      local s = 0
      for i = 1, #v do
        s = s + 16 + size(v[i])
      end
      return s
    end
    total = total + size(reply)
  else
    total = total + 8
  end
  if total > maxReply then
    fail = {4, n, 'reply', total}
    break
  end
  out[n + 2] = reply
  pos = pos + argc + 1
  n = n + 1
end

if fail then
  for i = 2, nw + 1 do
    if dumps[i] then
      local at = expiries[i]
      if at < 0 then at = 0 end
      redis.call('RESTORE', KEYS[i], at, dumps[i], 'REPLACE', 'ABSTTL')
    else
      redis.call('DEL', KEYS[i])
    end
  end
  return fail
end

if cur ~= token then
  redis.call('SET', KEYS[1], token)
end
if exact then
  out[n + 2] = exact
end
return out
`

// leaseCheck leads leaseScript, the fenced write of a fence whose terms
// come from a lease in this same Redis (election/redislease): the last
// two KEYS are its lease key and its counter key. Before anything else,
// and in the same script run as the write, the token must be the
// counter's current value (below: STALE_TOKEN; above, or no counter:
// UNKNOWN_TERM) and the lease key must exist (else TERM_ENDED: the lease
// expired or was released). Then the high-water rule and the write, as
// for any fence.
const leaseCheck = `local counter = redis.call('GET', KEYS[#KEYS])
if not counter then
  return {6, false}
end
if counter ~= ARGV[1] then
  if #counter > 20 or not string.match(counter, '^[1-9][0-9]*$') then
    return {8, string.sub(counter, 1, 64)}
  end
  local token = ARGV[1]
  local cmp = #token - #counter
  if cmp == 0 then
    for i = 1, #token do
      local a, b = string.byte(token, i), string.byte(counter, i)
      if a ~= b then
        cmp = a - b
        break
      end
    end
  end
  if cmp < 0 then
    return {5, counter}
  end
  return {6, counter}
end
if redis.call('EXISTS', KEYS[#KEYS - 1]) == 0 then
  return {7, counter}
end
`

// shebang starts both scripts.
const shebang = "#!lua\n"

// script is run by SHA (EVALSHA), falling back to EVAL when the server
// does not have it (after a restart or SCRIPT FLUSH).
var script = goredis.NewScript(fenceScript)

// leaseScript is fenceScript with leaseCheck first; a fence of another
// source never runs it.
var leaseScript = goredis.NewScript(leaseSource)

// leaseSource is leaseScript's source.
var leaseSource = shebang + leaseCheck + fenceScript[len(shebang):]

// The scripts' SHA1s, boxed once for the commands that name them (seal).
var scriptSHA, leaseScriptSHA any = script.Hash(), leaseScript.Hash()
