package redis

import goredis "github.com/redis/go-redis/v9"

// Markers leading the script's reply.
const (
	replyStale   = 0 // {0, high-water}: nothing written
	replyOK      = 1 // {1, reply, reply, ...}: applied
	replyFailed  = 2 // {2, command index, error text}: rolled back
	replyCorrupt = 3 // {3, stored value}: the token key holds no token
)

// fenceScript is the fenced write. KEYS[1] is the token key, KEYS[2] to
// KEYS[1+ARGV[2]] the keys the commands may write, then the keys they only
// read (declared for Redis Cluster). ARGV[1] is the token in canonical
// decimal, ARGV[2] the number of written keys, then each command as its
// argument count followed by its arguments.
//
// The token is compared as a decimal string (longer is larger, then byte
// by byte): Lua numbers are doubles and tokens go up to 2^64-1.
//
// Redis does not undo a script's earlier writes when a later command
// fails, so every written key is snapshotted (DUMP, PTTL) before the first
// command runs and restored (RESTORE ... REPLACE, or DEL if it did not
// exist) when one fails. The token key is only set after every command
// succeeded; commands cannot name it (check refuses the fencegate: prefix).
// A script runs atomically, so no client sees the intermediate state.
//
// The shebang (Redis 7) makes the server refuse the script up front when it
// is over maxmemory, instead of failing a command half-way.
const fenceScript = `#!lua
local token = ARGV[1]
local cur = redis.call('GET', KEYS[1])
if cur then
  if not string.match(cur, '^[1-9][0-9]*$') then
    return {3, cur}
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

local nw = tonumber(ARGV[2])
local dumps, ttls = {}, {}
for i = 2, nw + 1 do
  local d = redis.call('DUMP', KEYS[i])
  dumps[i] = d
  if d then
    ttls[i] = redis.call('PTTL', KEYS[i])
  end
end

local out = {1}
local pos, n = 3, 0
while pos <= #ARGV do
  local argc = tonumber(ARGV[pos])
  local reply = redis.pcall(unpack(ARGV, pos + 1, pos + argc))
  pos = pos + argc + 1
  n = n + 1
  if type(reply) == 'table' and reply.err then
    for i = 2, nw + 1 do
      if dumps[i] then
        local ttl = ttls[i]
        if ttl < 0 then ttl = 0 end
        redis.call('RESTORE', KEYS[i], ttl, dumps[i], 'REPLACE')
      else
        redis.call('DEL', KEYS[i])
      end
    end
    return {2, n - 1, reply.err}
  end
  out[n + 1] = reply
end

redis.call('SET', KEYS[1], token)
return out
`

// script is run by SHA (EVALSHA), falling back to EVAL when the server
// does not have it (after a restart or SCRIPT FLUSH).
var script = goredis.NewScript(fenceScript)
