// Package redis is fencegate's Redis backend: it runs fenced writes as one
// Lua script per write.
//
// The high-water mark of fence F lives at key fencegate:{F}:token as a
// decimal string. A fenced write (Backend.Exec) is one EVALSHA of a script
// that compares the write's token with the stored one, runs the caller's
// commands in order and raises the mark, all inside one script, which
// Redis runs atomically: no other client's command runs in between and no
// client sees an intermediate state. The script is sent by SHA and sent in
// full only when the server does not have it (after a restart, a failover
// or SCRIPT FLUSH).
//
// Writes are coalesced (package coalesce): at most Config.PoolSize
// batches are in flight, and writes that arrive while all are busy go out
// together, one EVALSHA each in one pipeline, on the next slot that frees
// up. Each is still its own script run with its own check and outcome;
// Redis reads and answers the pipeline with a system call or two instead
// of one per write.
//
// Guarantees:
//
//   - A write is applied only if its token is >= the fence's high-water mark,
//     which it raises in the same script (equal tokens are accepted: one
//     leader writes many times). Tokens are compared as decimal strings, so
//     the whole uint64 range is exact.
//   - All or nothing. Redis does not undo a script's earlier writes when a
//     later command fails, so the script snapshots every key the commands
//     may write (DUMP and PEXPIRETIME) before running them and, when one
//     fails (WRONGTYPE, "value is not an integer", ...), restores them
//     (RESTORE ... ABSTTL with the expiry's absolute time, to the
//     millisecond, or DEL for keys that did not exist) and leaves the
//     token unchanged. The refusal is STATEMENT_FAILED with the command's
//     index and Redis's error text. A key whose expiry passed while the
//     script ran is restored as expired: gone. A write that would
//     snapshot a key expiring 2^53 ms or more after the epoch (~285,000
//     years; PEXPIREAT accepts up to 2^63, but Lua's doubles are exact
//     only to 2^53) is refused before any command runs, STATEMENT_FAILED
//     with metadata "limit" "exact expiry"; a write of one command that
//     needs no snapshot (oneStepCommands, e.g. PERSIST) still runs.
//   - Commands are checked before anything is sent, against an allowlist
//     of data commands with known arity and key positions: strings, keys
//     (DEL, EXPIRE, TTL, ...), hashes, lists, sets, sorted sets and
//     streams; see commandTable. Everything else (scripting, admin commands,
//     blocking commands, pub/sub, MULTI/EXEC/WATCH, unknown commands) is
//     refused with COMMAND_NOT_ALLOWED. Names match in any ASCII case, as
//     Redis matches them, and only so: "ſet" (U+017F) is not SET. An
//     empty command or a wrong number of arguments is INVALID_REQUEST.
//     Config.Allow adds commands, but only those whose keys the package
//     knows how to find (RENAME, COPY, SUNIONSTORE, ZPOPMIN, ...), because
//     every key must be checked and snapshotted.
//   - Keys are bound to their fence by name: every key a command names
//     must carry the hash tag {F} exactly as Redis Cluster reads it (from
//     the first '{' to the first '}' after it; "{}" is no tag), e.g.
//     "{jobs}:last" or "user:{jobs}" for fence "jobs". Other keys, including
//     keys of other fences and untagged keys that happen to share the
//     fence's slot, are refused with INVALID_REQUEST, reads as well as
//     writes. Such keys are also in the slot of the token key, so a write
//     works unchanged on Redis Cluster.
//   - Keys starting with "fencegate:" are reserved: a command naming one is
//     refused with INVALID_REQUEST, so a write cannot move a fence.
//   - Lease fences (Config.Leases: fences whose terms come from a Redis
//     lease in this same server, election/redislease) run the same script
//     with a lease check first, in the same script run: the token must be
//     the lease counter's value (below it STALE_TOKEN; above it, or no
//     counter, UNKNOWN_TERM) and the lease key must exist (else
//     TERM_ENDED). Commands may not name the lease or counter key
//     (INVALID_REQUEST). Other fences' scripts are unchanged.
//   - Only database 0: SELECT, MOVE, SWAPDB, MIGRATE and COPY's DB option
//     are refused with COMMAND_NOT_ALLOWED, and Config.Allow cannot enable
//     them (Validate says so), because the rollback covers this database
//     only.
//   - Size limits, so that a small request cannot make Redis allocate a
//     lot or fencegate read a lot. Refused before sending, INVALID_REQUEST
//     with metadata "limit": an argument over Config.MaxValueBytes (1 MiB);
//     SETRANGE whose offset plus value, or SETBIT whose offset/8+1, is
//     over it; and a read whose reply repeats elements, which Redis
//     would build before the script can weigh it, when the repeats could
//     weigh over Config.MaxReplyBytes (4 MiB), each counted at the most a
//     value may be, MaxValueBytes plus 16: SRANDMEMBER or HRANDFIELD with
//     a negative count (each element, two with WITHVALUES), MGET naming a
//     key again, HMGET naming a field again (each name after its first).
//     With the defaults that is a count of -3 at most (-1 WITHVALUES) and
//     three repeated names per command; a lower MaxValueBytes or a
//     higher MaxReplyBytes allows more. Every other allowed read is
//     bounded by the keys it reads, or answers integers or scores, one
//     per argument (SMISMEMBER, ZMSCORE, EXISTS, ...); SINTER, SUNION and
//     SDIFF naming one set many times build it once.
//     Refused by the script, STATEMENT_FAILED with metadata "limit" and
//     rolled back: APPEND that would grow a string over MaxValueBytes
//     (weighed with STRLEN before it runs; a STRLEN that fails fails the
//     write), and a write whose replies weigh over MaxReplyBytes (LRANGE
//     0 -1 of a long list, HGETALL, MGET, ...: each string's bytes plus
//     16 per array element, added up over the write's commands). The
//     script never returns more than that.
//   - Integer replies are exact over the whole int64 range: the INCR
//     family's and HINCRBY's replies beyond ±2^53 (where Lua's doubles
//     round) are read back as the decimal the key holds; any other integer
//     reply beyond ±2^53 (PTTL of an expiry ~285,000 years away) refuses
//     the write, STATEMENT_FAILED, rolled back. Arguments are sent as
//     given, never through a float.
//   - Every error of Exec is a *tokens.RefusalError. Except for
//     BACKEND_UNAVAILABLE with metadata "outcome": "unknown", a refusal
//     means nothing was written. The client never retries a write on its
//     own: after a lost connection the script may have run.
//
// Config.CheckSlots is deprecated and ignored: the tag rule above is
// always on. The Backend connects to one server (or a proxy in front of a
// cluster); it does not follow MOVED redirections.
//
// What it does not guarantee:
//
//   - Durability is Redis's: a write acknowledged by a server that loses it
//     (no AOF with appendfsync always, or a failover to a replica that had
//     not received it) is lost, and with it the high-water mark, which a
//     lower token could then pass. Run Redis with appendonly yes and
//     appendfsync always where that matters; callers cannot WAIT for
//     replicas through fencegate.
//   - The rollback is by snapshot: a write's cost grows with the size of
//     the keys it writes (DUMP copies each whole key, inside the script
//     that holds the server), and keyspace notifications and replication
//     see the commands and then the restores. A script error that the
//     rollback itself cannot recover from (e.g. RESTORE failing) is
//     BACKEND_UNAVAILABLE with an unknown outcome.
//   - The limits bound what one request can make Redis allocate beyond
//     what it carries, not how large a fence's data grows: many writes can
//     build a list, hash or set of any size, and commands that copy
//     existing data (COPY, SUNIONSTORE, ZRANGESTORE, ... when allowed)
//     allocate as much as they copy. A read's reply is built inside Redis
//     before the script weighs it, so reading a large key costs Redis that
//     memory for the moment, though the reply never leaves it; a value
//     larger than MaxValueBytes (written around fencegate, or before the
//     limit was lowered) is read once more per repeat the limit above
//     lets through (MGET k k k k: four times with the defaults). Bound the
//     whole with Redis's maxmemory, and a maxmemory-policy that keeps keys
//     without an expiry (noeviction, volatile-*): the high-water marks are
//     such keys, and an evicted mark would let a stale token through. Open
//     refuses a Redis whose policy is allkeys-*, and a policy changed to
//     it later makes every write refused (Config.EvictionCheck).
//   - Replies pass through Lua: scores come back as the strings Redis
//     sends, and an integer reply beyond ±2^53 of a command other than
//     the INCR family and HINCRBY refuses the write (see above).
//   - It is not a security boundary. Use Redis ACLs to limit what the user
//     fencegate connects as can do; the allowlist, the key rule and the
//     limits keep a caller to its fence's keys and the script's guarantees,
//     but Redis's own privileges draw the real boundary. Open refuses a
//     user who may not run the commands a write's rollback needs (DUMP,
//     PEXPIRETIME, RESTORE, DEL, ...): Redis would abort the script there
//     and keep the half-done write. An ACL can differ by key (selectors),
//     so the script also asks Redis (redis.acl_check_cmd), before anything
//     is written, whether the user may run what it runs itself after a
//     command wrote: RESTORE and DEL of each snapshotted key, SET of the
//     token key when the mark is raised, STRLEN of APPEND's key, GET
//     (HGET) of the INCR family's (HINCRBY's) key. If not, nothing is
//     written: STATEMENT_FAILED with metadata "command" (the command the
//     key is for) and "permission" (what the user may not run), or, for
//     the token key, BACKEND_UNAVAILABLE with "permission" "SET". So an
//     INCR is refused to a user who may INCR a key but not GET it.
//     Config.TLS, Username and Password secure the connections.
//   - Fences lists fences with SCAN: its cost grows with the whole
//     database and a fence created during the walk may be missing.
//
// The script needs Redis 7.0 or later (it starts with a #!lua shebang, so
// a server over maxmemory refuses it up front instead of failing a command
// half-way).
package redis
