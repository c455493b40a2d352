package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/election"
	rdproxy "github.com/fencegate/fencegate/proxy/redis"
)

// Hostile leaders (--hostile, docs/SAFETY.md): a leading worker that,
// between its ordinary writes, sends a write meant to get round the fence,
// with its own valid token. Each attack carries ledger records first, so
// that a refused attack that left anything behind shows as a refused write
// stored, and an attack that went through shows in the backend's marks or
// state at the end (check.go, campaign.go's readBackend).

// maxToken is the highest bigint, the mark an attacker would like another
// fence to have: its real leader is refused for ever after.
const maxToken = "9223372036854775807"

// attack is one kind of hostile write. Every attack must be refused; an
// abuse attack (load, not a breach of the fence) may instead be accepted if
// it does no harm.
type attack struct {
	name  string
	abuse bool
	// weight is how often it is drawn relative to the others: abuse
	// attacks hold a connection or the backend's CPU for up to a second,
	// so they are drawn rarely enough not to starve the ordinary writes.
	weight int
	// rows is the number of ledger records the write carries, with seqs
	// seq to seq+rows-1.
	rows  int
	build func(cfg workerConfig, token, seq int64) request
	// as is whom the attack is sent as: "" the worker itself, asIntruder
	// or asStranger.
	as string
}

// Whom an attack may be sent as besides the worker (secure.go).
const (
	// asIntruder: a valid client certificate whose principal no rule
	// lets write the fence; the policy must refuse it (NOT_AUTHORIZED).
	asIntruder = "intruder"
	// asStranger: no client certificate; the TLS handshake must refuse it
	// (or fencegate, UNAUTHENTICATED).
	asStranger = "stranger"
)

// authAttacks are the writes of an ordinary record, with the leader's
// valid token (as if stolen), by someone the gateways must not let write
// the fence.
func authAttacks() []attack {
	var out []attack
	for _, as := range []string{asIntruder, asStranger} {
		out = append(out, attack{name: as + "-write", weight: attackWeight, rows: 1, as: as, build: recordRequest})
	}
	return out
}

const (
	attackWeight = 20
	abuseWeight  = 1
)

// sqlQuote quotes s as an SQL string literal.
func sqlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// pgAttack is an attack of one record followed by statements sqls.
func pgAttack(name string, sqls ...string) attack {
	return attack{name: name, weight: attackWeight, rows: 1, build: func(cfg workerConfig, token, seq int64) request {
		stmts := []stmt{recordStmt(cfg, token, seq)}
		for _, s := range sqls {
			stmts = append(stmts, stmt{sql: s})
		}
		return request{stmts: stmts}
	}}
}

func abuse(a attack) attack {
	a.abuse, a.weight = true, abuseWeight
	return a
}

// pgAttacks are the attacks on PostgreSQL; other is the fence they aim at
// besides their own.
func pgAttacks(other string) []attack {
	upsert := func(table string) string {
		return "INSERT INTO " + table + "(name,token) VALUES (" + sqlQuote(other) + ", " + maxToken +
			") ON CONFLICT (name) DO UPDATE SET token = excluded.token"
	}
	return []attack{
		// With schema evil's "=" first on the search path (campaign.go
		// creates it), an advance that compared with the caller's "="
		// would accept any token.
		pgAttack("search-path", "SELECT set_config('search_path','evil, pg_catalog, public', false)"),
		pgAttack("upsert-other-mark", upsert("fencegate.fences")),
		pgAttack("upsert-other-mark-comment", upsert("fencegate/**/.fences")),
		pgAttack("upsert-other-mark-unicode", upsert(`U&"fenc\0065gate".fences`)),
		pgAttack("advance-other", "SELECT fencegate.advance("+sqlQuote(other)+", "+maxToken+")"),
		pgAttack("dynamic-update-marks", "DO $$ BEGIN EXECUTE format('UPDATE %I.fences SET token = "+maxToken+"', 'fence'||'gate'); END $$"),
		pgAttack("dynamic-advance-other", dynamicAdvance(other)),
		// Commit the first record on its own, then the second outside the
		// fenced transaction.
		{name: "split-commit", weight: attackWeight, rows: 2, build: func(cfg workerConfig, token, seq int64) request {
			return request{stmts: []stmt{
				recordStmt(cfg, token, seq), {sql: "-- x\rCOMMIT\nWORK"}, recordStmt(cfg, token, seq+1),
			}}
		}},
		// Leave the connection in a transaction, to be committed by
		// whoever uses it next.
		pgAttack("split-begin", "-- x\rBEGIN\nWORK"),
		pgAttack("temp-shadow", "CREATE TEMP TABLE ledger (id bigserial PRIMARY KEY, fence text, worker text, token bigint, seq bigint)"),
		pgAttack("rule-instead-nothing", "CREATE RULE fencechaos_drop AS ON INSERT TO ledger DO INSTEAD NOTHING"),
		pgAttack("read-only-session", "SELECT set_config('default_transaction_read_only','on',false)"),
		pgAttack("no-statement-timeout", "SELECT set_config('statement_timeout','0',false)"),
		pgAttack("advisory-lock", "SELECT pg_advisory_lock(7378697629483820646)"),
		pgAttack("dblink", "CREATE EXTENSION dblink"),
		pgAttack("read-file", "SELECT pg_read_file('/etc/passwd')"),
		pgAttack("copy-program", "COPY (SELECT 1) TO PROGRAM 'id'"),
		abuse(pgAttack("generate-series", "SELECT generate_series(1,1000000)")),
		abuse(pgAttack("sleep", "SELECT pg_sleep(4.5)", "SELECT pg_sleep(4.5)", "SELECT pg_sleep(4.5)")),
	}
}

// dynamicAdvance runs the fence check of fence other with the highest
// token from dynamic SQL, which no check of the statement's text sees,
// after clearing the setting by which the database once refused a second
// check in a transaction (before migration 007).
func dynamicAdvance(other string) string {
	return "DO $$ BEGIN EXECUTE 'RESET ALL'; EXECUTE 'SELECT fence' || 'gate.advance(' || " + sqlQuote(sqlQuote(other)) +
		" || ', " + maxToken + ")'; END $$"
}

// pgwireAttack is pgAttack sent by a pgwire worker as one Query string,
// its record inlined: statements that would run outside the fenced
// transaction, or name fencegate's schema, settings or statements, must
// make the listener refuse the whole string (FG006), and the rest must be
// refused by the database, whose privileges are the client's own login's.
func pgwireAttack(name string, sqls ...string) attack {
	a := pgAttack(name, sqls...)
	build := a.build
	a.build = func(cfg workerConfig, token, seq int64) request {
		r := build(cfg, token, seq)
		r.simple = true
		return r
	}
	return a
}

// pgwireAttacks are the attacks through fencegate's PostgreSQL listener;
// other is the fence they aim at besides their own. There the session is
// the client's own, as in a direct session: what it sets for itself
// (read-only, statement_timeout, an advisory lock, BEGIN left open) is
// allowed and hurts only itself, so pgAttacks' session attacks are left
// out, but search-path stays, as abuse that may be accepted: every later
// transaction of that session must still be fenced.
func pgwireAttacks(other string) []attack {
	upsert := func(table string) string {
		return "INSERT INTO " + table + "(name,token) VALUES (" + sqlQuote(other) + ", " + maxToken +
			") ON CONFLICT (name) DO UPDATE SET token = excluded.token"
	}
	searchPath := pgwireAttack("search-path", "SELECT set_config('search_path','evil, pg_catalog, public', false)")
	searchPath.abuse = true
	// Dynamic SQL swaps the check fencegate prepares on the session for a
	// statement of the same name that checks nothing (its text names
	// neither: the listener would refuse it). Allowed, as abuse: every
	// later transaction of the session must still be fenced, because
	// the listener prepares its check again for each.
	replaceCheck := pgwireAttack("replace-check", "DO $$ BEGIN "+
		"BEGIN EXECUTE 'DEALLOC' || 'ATE fence' || 'gate_check'; EXCEPTION WHEN invalid_sql_statement_name THEN NULL; END; "+
		"EXECUTE 'PREP' || 'ARE fence' || 'gate_check(text, int8) AS SELECT 0::int8'; END $$")
	replaceCheck.abuse = true
	twoRows := func(name string, build func(rec func(seq int64) stmt) []stmt) attack {
		return attack{name: name, weight: attackWeight, rows: 2, build: func(cfg workerConfig, token, seq int64) request {
			return request{simple: true, stmts: build(func(i int64) stmt { return recordStmt(cfg, token, seq+i) })}
		}}
	}
	return []attack{
		searchPath,
		replaceCheck,
		pgwireAttack("upsert-other-mark", upsert("fencegate.fences")),
		pgwireAttack("upsert-other-mark-comment", upsert("fencegate/**/.fences")),
		pgwireAttack("upsert-other-mark-unicode", upsert(`U&"fenc\0065gate".fences`)),
		pgwireAttack("advance-other", "SELECT fencegate.advance("+sqlQuote(other)+", "+maxToken+")"),
		pgwireAttack("dynamic-update-marks", "DO $$ BEGIN EXECUTE format('UPDATE %I.fences SET token = "+maxToken+"', 'fence'||'gate'); END $$"),
		pgwireAttack("dynamic-advance-other", dynamicAdvance(other)),
		// The token is the connection's: changing it inside a
		// transaction, or by set_config, is refused. RESET ALL is
		// allowed, and leaves the token and the fence check alone.
		pgwireAttack("set-token-in-transaction", "SET fencegate.token = "+maxToken),
		pgwireAttack("set-config-token", "SELECT set_config('fencegate.token', '"+maxToken+"', false)"),
		abuse(pgwireAttack("reset-all", "RESET ALL")),
		pgwireAttack("prepare-fencegate-name", "PREPARE fencegate_check AS SELECT 1"),
		// Commit the first record, then run the second in a transaction
		// the listener did not fence.
		twoRows("split-commit", func(rec func(int64) stmt) []stmt {
			return []stmt{rec(0), {sql: "-- x\rCOMMIT\nWORK"}, rec(1)}
		}),
		twoRows("commit-and-chain", func(rec func(int64) stmt) []stmt {
			return []stmt{rec(0), {sql: "COMMIT AND CHAIN"}, rec(1)}
		}),
		// Alone in its string, a DO may COMMIT: its second record would
		// be written after the fenced transaction ended.
		{name: "do-commit", weight: attackWeight, rows: 2, build: func(cfg workerConfig, token, seq int64) request {
			return request{simple: true, stmts: []stmt{{sql: "DO $$ BEGIN " + inlineParams(recordStmt(cfg, token, seq)) + "; COMMIT; " +
				inlineParams(recordStmt(cfg, token, seq+1)) + "; END $$"}}}
		}},
		pgwireAttack("temp-shadow", "CREATE TEMP TABLE ledger (id bigserial PRIMARY KEY, fence text, worker text, token bigint, seq bigint)"),
		pgwireAttack("rule-instead-nothing", "CREATE RULE fencechaos_drop AS ON INSERT TO ledger DO INSTEAD NOTHING"),
		pgwireAttack("dblink", "CREATE EXTENSION dblink"),
		pgwireAttack("read-file", "SELECT pg_read_file('/etc/passwd')"),
		pgwireAttack("copy-program", "COPY (SELECT 1) TO PROGRAM 'id'"),
		abuse(pgwireAttack("generate-series", "SELECT generate_series(1,1000000)")),
		abuse(pgwireAttack("sleep", "SELECT pg_sleep(4.5)", "SELECT pg_sleep(4.5)", "SELECT pg_sleep(4.5)")),
	}
}

// redisAttack is an attack of one record followed by commands cmds.
func redisAttack(name string, cmds ...[]string) attack {
	return attack{name: name, weight: attackWeight, rows: 1, build: func(cfg workerConfig, token, seq int64) request {
		return request{cmds: append([][]string{recordCmd(cfg, token, seq)}, cmds...)}
	}}
}

// redisAttacks are the attacks on Redis for fence's leader; other is the
// fence they aim at besides their own.
func redisAttacks(fence, other string) []attack {
	return []attack{
		// A key of the fence's slot that is not the fence's by name.
		redisAttack("untagged-slot-twin", []string{"SET", slotTwin(ledgerKey(fence)), "x"}),
		redisAttack("other-fence-key", []string{"SET", "{" + other + "}:x", "x"}),
		redisAttack("setrange-100mb", []string{"SETRANGE", "{" + fence + "}:big", "104857599", "x"}),
		redisAttack("other-token-key", []string{"SET", rdproxy.TokenKey(other), maxToken}),
		redisAttack("eval", []string{"EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1", rdproxy.TokenKey(other), maxToken}),
		redisAttack("copy-db", []string{"COPY", ledgerKey(fence), "{" + fence + "}:copy", "DB", "1"}),
	}
}

// slotTwin returns a key without a hash tag in key's cluster slot.
func slotTwin(key string) string {
	slot := rdproxy.Slot(key)
	for i := 0; ; i++ {
		k := "fencechaos:twin:" + strconv.Itoa(i)
		if rdproxy.Slot(k) == slot {
			return k
		}
	}
}

// attacker draws a worker's attacks. Its methods are safe for the
// worker's writing goroutines; a nil attacker never attacks.
type attacker struct {
	p       float64
	attacks []attack
	total   int

	mu  sync.Mutex
	rng *rand.Rand
}

// newAttacker returns the attacker of cfg, nil when --hostile is 0.
func newAttacker(cfg workerConfig) *attacker {
	if cfg.HostileP <= 0 {
		return nil
	}
	a := &attacker{p: cfg.HostileP, rng: rand.New(rand.NewPCG(cfg.Seed, 0xa77ac4))}
	switch {
	case cfg.Protocol == protoPgwire:
		a.attacks = pgwireAttacks(cfg.OtherFence)
	case cfg.Backend == "postgres":
		a.attacks = pgAttacks(cfg.OtherFence)
	default:
		a.attacks = redisAttacks(cfg.Fence, cfg.OtherFence)
	}
	if cfg.Intruder.CA != "" {
		a.attacks = append(a.attacks, authAttacks()...)
	}
	for _, at := range a.attacks {
		a.total += at.weight
	}
	return a
}

// now draws whether to attack before the next write.
func (a *attacker) now() bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rng.Float64() < a.p
}

// pick draws an attack by weight.
func (a *attacker) pick() attack {
	a.mu.Lock()
	n := a.rng.IntN(a.total)
	a.mu.Unlock()
	for _, at := range a.attacks {
		if n < at.weight {
			return at
		}
		n -= at.weight
	}
	return a.attacks[len(a.attacks)-1]
}

// attack sends one attack with token tok and records it and its outcome.
// The error is the history's.
func (w *worker) attack(ctx context.Context, tok int64) (Outcome, string, error) {
	at := w.attacks.pick()
	seq := w.seq.Add(int64(at.rows)) - int64(at.rows) + 1
	send := w.send
	if at.as != "" {
		send = w.sendAs[at.as]
	}
	if err := w.hist.log(event{Type: evInvoke, Token: tok, Seq: seq, Attack: at.name, Rows: at.rows, Abuse: at.abuse, As: at.as}); err != nil {
		return Unknown, "", err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Timeout)
	start := time.Now()
	out, reason := send(rctx, tok, at.build(w.cfg, tok, seq))
	cancel()
	_ = w.hist.outcome(seq, out, reason)
	if out == Acked && !at.abuse {
		w.log.Warn("hostile write accepted", "attack", at.name, "token", tok, "seq", seq)
	} else {
		w.log.Debug("hostile write", "attack", at.name, "outcome", out, "reason", reason, "took", time.Since(start))
	}
	return out, reason, nil
}

// evilDDL is what an attacker would have prepared beforehand, made by the
// superuser at setup so that the search-path attack would bite if it got
// through: an "=" on bigints that is always true, where anyone finds it.
var evilDDL = []string{
	"CREATE SCHEMA evil",
	"CREATE FUNCTION evil.yes(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true'",
	"CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.yes)",
	"GRANT USAGE ON SCHEMA evil TO PUBLIC",
}

// writeOtherFence gives the attacks' other fence a leader and one write
// through fencegate, recorded in a history of its own like a worker's, so
// that its mark and ledger are known and checked at the end like the
// fence's.
func (c *campaign) writeOtherFence(ctx context.Context) error {
	other := c.otherFence()
	const id = "setup"
	cfg := workerConfig{ID: id, Fence: other, Backend: c.cfg.Backend, Mode: "fenced", HTTPP: 1}
	for _, g := range c.gateways {
		cfg.Gateways = append(cfg.Gateways, g.grpcAddr)
		cfg.HTTPGateways = append(cfg.HTTPGateways, g.httpAddr)
	}
	var files tlsFiles
	if c.creds != nil {
		files = c.creds.campaign
	}
	send, closeSend, err := newFencedSender(cfg, files)
	if err != nil {
		return err
	}
	defer closeSend()
	hist, err := createHistory(filepath.Join(c.dir, "hist", id+".jsonl"), id, other)
	if err != nil {
		return err
	}
	defer hist.Close()

	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	lead, err := election.Campaign(cctx, c.cli, election.CampaignConfig{
		Prefix: election.DefaultPrefix, Election: other, Value: id, TTL: c.cfg.TTL,
	})
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = lead.Resign(rctx)
		cancel()
	}()
	tok := lead.Token()
	if err := hist.log(event{Type: evElect, Token: tok}); err != nil {
		return err
	}
	// A few tries: the replica's watch may not have the term yet.
	var out Outcome
	var reason string
	for seq := int64(1); seq <= 5 && out != Acked; seq++ {
		if err := hist.log(event{Type: evInvoke, Token: tok, Seq: seq}); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(cctx, 2*time.Second)
		out, reason = send(wctx, tok, recordRequest(cfg, tok, seq))
		cancel()
		if err := hist.outcome(seq, out, reason); err != nil {
			return err
		}
	}
	if out != Acked {
		return fmt.Errorf("fence %s: write with token %d: %s %s", other, tok, out, reason)
	}
	c.logf("fence %s written with token %d: the attacks aim at its mark", other, tok)
	return nil
}
