// Package resp is fencegate's Redis listener: unmodified Redis clients
// (redis-cli, redis-benchmark, go-redis, redis-py, ...) connect to it as to
// Redis, and every data command they send is fenced (API.md, "RESP
// (drop-in Redis)").
//
// The fence and token come with AUTH: the user name is the fence, the
// password the token (AUTH <fence> <token>, or HELLO 2|3 AUTH <fence>
// <token>); AUTH again, or AUTH <token> alone, changes the token. Before
// AUTH, data commands get -NOAUTH. The principal the policy sees is the
// verified TLS client certificate's (api/auth.PrincipalOf), until the
// certificate expires or a reload takes the CA it was verified by out of
// --trusted-ca-file (api/auth.ChainsInvalid): the first command after
// that gets -UNAUTHENTICATED and the connection closes. The action is
// redis.write. Every data command, reads included, goes to the one write
// pipeline, proxy.Gateway.Redis, which authorizes, decides on the token,
// and runs the commands in the fencing script of proxy/redis with its
// allowlist, arity and {fence} key rules. fencegate answers PING, ECHO,
// SELECT 0, CLIENT SETNAME|GETNAME|SETINFO|ID, QUIT, RESET, HELLO, AUTH,
// a minimal COMMAND and a minimal INFO itself (INFO says what HELLO says,
// and loading:0, which ioredis waits for; nothing of the Redis behind),
// and CLUSTER, READONLY, READWRITE and ASKING as a Redis without cluster
// mode does (rueidis sends CLUSTER SLOTS as it connects).
//
// Replies: fencegate's refusals are error replies whose first word is the
// reason (-STALE_TOKEN fencegate: ...); an error of Redis itself inside
// the script (WRONGTYPE, ERR value is not an integer ...) is passed on as
// Redis sent it. RESP2 and RESP3 (HELLO 3) are spoken, and a data
// command's reply has the bytes Redis would send in the session's
// protocol: the script's Lua values lose status replies, null arrays and
// RESP3's maps, sets, doubles and score pairs, so the listener restores
// them from the command (shape.go; TestReplyShapesAsRedis compares every
// allowed command's replies with a Redis server's, in both protocols).
//
// Pipelining. A connection is served by one goroutine that reads a command
// and then every data command the client has already sent (whatever has
// arrived, up to Config.MaxPipelineBatch), runs them as one fenced write,
// writes the replies in order and flushes when no further command has
// begun to arrive; empty commands (blank inline lines, *0), which Redis
// skips, are skipped first, so a command followed by one is answered at
// once. Once a write of replies has waited 1 ms for a client that reads
// none yet (go-redis Pipelined writes every command before it reads),
// another goroutine reads the connection while the write waits: the
// client's further commands are read and held, up to
// Config.MaxReadAheadBytes, so that the client finishes writing and reads.
// They are not run meanwhile: a client that stopped reading gets nothing
// more applied whose reply it would never read. Past the bound reading
// stops, and a client that still reads nothing for WriteTimeout is closed
// (logged), as Redis closes one over its output buffer limit. Writes of
// different connections share round trips to Redis in the coalescer.
// Commands of one connection are never in flight at once: the coalescer
// spreads concurrent writes over several Redis connections, so two of them
// could run in either order, and Redis runs a client's pipeline in order.
// Running a pipeline as one script makes it atomic, a subset of what Redis
// allows, but it must not let one command's failure abort the others, as
// Redis does not: when the write is refused because of one command
// (COMMAND_NOT_ALLOWED, INVALID_REQUEST, or STATEMENT_FAILED, Redis's
// error, rolled back), nothing was applied, so the commands before it run
// again as one write, it runs alone and gets its own answer, and the rest
// follow. A refusal of the token (STALE_TOKEN, ...) answers every command
// of the batch alike, as it would each of them.
//
// MULTI ... EXEC: commands are queued by fencegate (+QUEUED) and EXEC
// runs them as one fenced write, all or nothing. Unlike Redis, a command
// that fails at EXEC (e.g. WRONGTYPE) aborts the whole transaction,
// nothing applied: EXEC answers -EXECABORT with the reason. A command
// refused while queueing (before AUTH, too many) also makes EXEC answer
// -EXECABORT. DISCARD works; WATCH is refused (nothing outside the
// script can be watched through fencegate); other commands fencegate
// answers itself are refused inside MULTI.
//
// Input is bounded (Config): open connections (as Redis's maxclients),
// arguments per command, bytes per argument and per command, bytes per
// inline command, bytes read ahead (16 KiB before AUTH). Malformed or oversized input
// gets -ERR Protocol error and the connection is closed, as Redis does;
// commands before it in the stream are answered first, nothing after it
// runs. Before closing a logged-in client's connection, fencegate reads
// and drops what it still sends for up to 5 s (listen.Linger), so that a
// client still writing an oversized value reads the error instead of a
// connection reset. Inline commands split on white space; quotes are
// refused.
//
// What it does not do: SELECT of another database, pub/sub, blocking
// commands, scripting and administration (refused by the allowlist, as
// in the HTTP API), WATCH, CLIENT subcommands beyond those above, RESP3
// push replies and client-side caching, and the cluster protocol. The
// score of ZRANK/ZREVRANK ... WITHSCORE (Redis 7.2) stays a bulk string in
// RESP3: the Redis of this project's tests (7.0) has no such option to
// compare with.
package resp
