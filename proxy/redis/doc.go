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
//     may write (DUMP and PTTL) before running them and, when one fails
//     (WRONGTYPE, "value is not an integer", ...), restores them (RESTORE
//     with the remaining TTL, or DEL for keys that did not exist) and
//     leaves the token unchanged. The refusal is STATEMENT_FAILED with the
//     command's index and Redis's error text.
//   - Commands are checked before anything is sent, against an allowlist
//     of data commands with known arity and key positions: strings, keys
//     (DEL, EXPIRE, TTL, ...), hashes, lists, sets, sorted sets and
//     streams; see commandTable. Everything else (scripting, admin commands,
//     blocking commands, pub/sub, MULTI/EXEC/WATCH, SELECT/MOVE/SWAPDB,
//     unknown commands) is refused with COMMAND_NOT_ALLOWED. An empty
//     command or a wrong number of arguments is INVALID_REQUEST. Config.Allow
//     adds commands, but only those whose keys the package knows how to find
//     (RENAME, COPY, SUNIONSTORE, ZPOPMIN, ...), because every key must be
//     checked and snapshotted.
//   - Keys starting with "fencegate:" are reserved: a command naming one is
//     refused with INVALID_REQUEST, so a write cannot move a fence.
//   - Every error of Exec is a *tokens.RefusalError. Except for
//     BACKEND_UNAVAILABLE with metadata "outcome": "unknown", a refusal
//     means nothing was written. The client never retries a write on its
//     own: after a lost connection the script may have run.
//
// Redis Cluster: a script may only touch keys of one hash slot. With
// Config.CheckSlots (on in DefaultConfig), every key of a write must hash
// to the slot of fencegate:{F}:token, which in practice means every key
// carries the hash tag {F}, e.g. "{jobs}:last" for fence "jobs"; other keys
// are refused with INVALID_REQUEST saying so. The check is the same on a
// single server, so code that passes it keeps working on a cluster. Turn it
// off only for a single server and keys you cannot rename. The Backend
// itself connects to one server (or a proxy in front of a cluster); it does
// not follow MOVED redirections.
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
//     the keys it writes (DUMP copies each whole key), and keyspace
//     notifications and replication see the commands and then the
//     restores. A script error that the rollback itself cannot recover from
//     (e.g. RESTORE failing) is BACKEND_UNAVAILABLE with an unknown outcome.
//   - Replies pass through Lua: integers beyond 2^53 in replies lose
//     precision (the stored values do not), and scores come back as the
//     strings Redis sends.
//   - It is not a security boundary. Use Redis ACLs to limit what the user
//     fencegate connects as can do; the allowlist prevents accidents and
//     keeps the script's guarantees, it does not sandbox.
//   - Fences lists fences with SCAN: its cost grows with the whole
//     database and a fence created during the walk may be missing.
//
// The script needs Redis 7.0 or later (it starts with a #!lua shebang, so
// a server over maxmemory refuses it up front instead of failing a command
// half-way).
package redis
