// Package redislease is the term source of fences whose leaders hold a
// Redis lease (--term-sources=PATTERN=redis-lease): the layout of the
// common Redis lock with a fencing counter.
//
// A candidate for fence F takes the lease with
//
//	SET lease:F <holder id> NX PX <ttl ms>
//
// and, when that succeeds, INCR lease:F:token: the reply is its fencing
// token. While leading it renews with a compare-and-PEXPIRE script and it
// releases with compare-and-DEL. Both key names are patterns (Config),
// with %s for the fence. New refuses two patterns under which a fence's
// lease key is some fence's counter key (ValidatePatterns): fence names
// hold '.', '_' and '-', so "lease-%s" and "lease-%s-token" make fence
// X-token's lease X's counter, held for ever once X's INCR ran. One text
// before %s in both, and after it texts that differ and each start with a
// byte fence names cannot hold (the defaults' ':') or are empty, keeps
// them apart.
//
// The term of F is the counter while the lease key exists (Term.Rev), no
// leader when it does not (Rev 0), and Term.Last is the counter either
// way: a token below the counter is STALE_TOKEN, the counter's token with
// no lease is TERM_ENDED (an expired or released lease ends the term), a
// token above the counter, or any token before a first INCR, UNKNOWN_TERM.
//
// What it guarantees:
//   - Term reads memory only: no I/O and no allocation, for every write.
//   - Verify reads both keys in one MULTI/EXEC, so the lease and the
//     counter it answers with are of one moment.
//   - Run refreshes every fence Verify found a counter for, each poll
//     interval, so a lease that changed hands or expired is known from
//     memory within about one interval.
//
// What it does not guarantee:
//   - The lease key tells that someone holds the lease, not who: the
//     counter is only raised after SET NX succeeded, so between a new
//     holder's SET and its INCR the previous holder's token still equals
//     the counter and is accepted. Its writes then come before any write
//     of the new term, which is the order fencing needs.
//   - Memory lags Redis by up to one poll interval; callers that need the
//     lease as it is now (read before use) call Verify, and the fencing
//     script of the Redis backend checks it atomically when the lease and
//     the data share a Redis.
//   - Durability is Redis's: a counter lost in a crash (no AOF with
//     appendfsync always) can hand out a token again. Once a read shows
//     the counter below (or without) what memory held, every token up to
//     the highest handed out before is no leader's (TERM_ENDED), whoever
//     holds the lease, until fencegate restarts: leaders campaign past
//     it. A loss fencegate did not see (it restarted meanwhile, or polls
//     no longer) is not caught.
package redislease
