// Package pgterm is the postgres-term term source: elections held with a
// PostgreSQL advisory lock whose winner raises its row of a term table, as
// the seed worker does:
//
//	SELECT pg_try_advisory_lock(hashtext('jobs'));   -- true: this session leads
//	INSERT INTO leadership_term(name, term) VALUES ('jobs', 1)
//	ON CONFLICT (name) DO UPDATE SET term = leadership_term.term + 1
//	RETURNING term;                                  -- its fencing token
//
// and keeps that session open while it leads. An election's term is its
// row's term while some session of the database holds its advisory lock
// exclusively; with no exclusive lock held the term is over. A shared lock
// (pg_advisory_lock_shared) is no leader's: many sessions hold one at once.
// Nor is a lock whose key another row of the term table derives too (two
// names with one hashtext): it may be either election's leader's, so
// neither term counts as current (logged once as a warning naming both).
//
// The source keeps what it last read in memory (Term, for every write's
// fast path, no I/O and no state kept of a name asked about) and refreshes
// it every Config.Poll for the elections it follows: those a read found a
// row of. Verify reads the row and pg_locks afresh; a name is followed
// once Verify found its row (a leader's first write, above every term in
// memory, is verified), up to 10000 elections. Past that bound the rows
// found are answered by Verify but not kept (logged once), and a name
// whose row is gone stays followed. A name without a row is never
// followed, so writes to made-up names, refused or not, cannot fill the
// bound. A row seen going back
// (deleted and counted again, restored, lowered) hands its numbers out a
// second time: from then on, until fencegate restarts, a term up to the
// highest read before is no leader's (TERM_ENDED), and leaders campaign
// past it. The backend's own check
// (fencegate.advance_term, migrations 005, 010, 011 and 012) is final: it
// runs in the fenced write's transaction.
//
// Open refuses a term table that fencegate.term_table_problem (migration
// 012) finds a problem with, from the catalogs alone, before any read of
// the table: one whose reading could run code a role other than a
// superuser or fencegate_owner chose (its owner, row security, rules,
// triggers, the types of name and term), or whose columns, index
// expressions and predicates or statistics depend on such a role's
// functions, operators, types or collations, which ANALYZE runs as the
// table's owner. It cannot undo what such a table ran before Open.
package pgterm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy/postgres/pgdsn"
)

// Defaults of Config.
const (
	DefaultTable   = "leadership_term"
	DefaultLockKey = "hashtext"
	DefaultPoll    = time.Second
)

// maxNames bounds the elections the source follows. Only a read that
// found an election's row follows it, so only rows workers created fill
// it; names from writes alone (made up by anyone) never do.
const maxNames = 10000

// Config configures a Source.
type Config struct {
	// DSN is the database of the elections (fencegate's --postgres-dsn).
	DSN string
	// Table is the term table (name text primary key, term bigint not
	// null), schema-qualified or found by the login's search_path. Default
	// DefaultTable.
	Table string
	// LockKey is how an election's advisory lock key derives from its name:
	// "hashtext" (hashtext(name)) or "hashtextextended"
	// (hashtextextended(name, 0)). Default DefaultLockKey.
	LockKey string
	// Poll is how often the terms of the fences seen are read again.
	// Default DefaultPoll.
	Poll time.Duration
	// Logger receives failed polls. Nil discards them.
	Logger *slog.Logger
}

// Source is a postgres-term source. It is safe for concurrent use.
type Source struct {
	pool    *pgxpool.Pool
	table   string // schema-qualified and quoted
	lockKey string
	poll    time.Duration
	log     *slog.Logger

	verifySQL, pollSQL string

	mu     sync.RWMutex
	terms  map[string]election.Term // by name: elections a read found a row of
	shared map[string]string        // by name: another election with its lock key, last logged
	// floors are, for elections whose row was seen going back (deleted
	// and counted again, restored, lowered), the highest term read
	// before: those numbers are handed out again, so no holder of one
	// is a leader (store).
	floors map[string]int64
	// full: a row was found of an election past maxNames (logged once).
	full bool
	// reads numbers the reads as they start; storedAt is, by name, the
	// number of the read memory's term is from (store).
	reads    uint64
	storedAt map[string]uint64
}

// Open connects to cfg.DSN and checks that the term table exists and that
// fencegate_owner, who runs the backend's check, may read and lock its
// rows. Call Run to keep the terms fresh and Close when done.
func Open(ctx context.Context, cfg Config) (*Source, error) {
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if cfg.LockKey == "" {
		cfg.LockKey = DefaultLockKey
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	// keyOf is the lock key of a name, as advance_term (migration 011)
	// derives it: the expression an index on the key would have.
	var keyOf func(name string) string
	switch cfg.LockKey {
	case "hashtext":
		keyOf = func(name string) string { return "pg_catalog.hashtext(" + name + ")" }
	case "hashtextextended":
		keyOf = func(name string) string { return "pg_catalog.hashtextextended(" + name + ", 0)" }
	default:
		return nil, fmt.Errorf("pgterm: lock key derivation %q: want hashtext or hashtextextended", cfg.LockKey)
	}
	if cfg.Poll < 10*time.Millisecond {
		return nil, fmt.Errorf("pgterm: poll interval %v: want at least 10ms", cfg.Poll)
	}
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("pgterm: invalid DSN: %w", pgdsn.ParseError(err))
	}
	pc.MaxConns = 2
	pc.ConnConfig.RuntimeParams["application_name"] = "fencegate-term-source"
	// A row security policy on the term table would run functions of its
	// owner's choosing as fencegate's login: refused with an error instead.
	pc.ConnConfig.RuntimeParams["row_security"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgterm: %w", err)
	}
	s := &Source{
		pool: pool, lockKey: cfg.LockKey, poll: cfg.Poll, log: cfg.Logger,
		terms: map[string]election.Term{}, shared: map[string]string{}, floors: map[string]int64{}, storedAt: map[string]uint64{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.resolve(ctx, cfg.Table); err != nil {
		pool.Close()
		return nil, err
	}
	// One snapshot of the granted exclusive advisory locks of this
	// database, then each row's term and whether its lock is among them.
	// A shared lock (mode ShareLock) confers no leadership, nor does one
	// fencegate's own connections hold (a fenced write of another fence
	// may take the key's lock for its transaction): as advance_term.
	locks := `WITH l AS MATERIALIZED (
  SELECT l.classid, l.objid FROM pg_catalog.pg_locks AS l
   WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock' AND l.objsubid = 1
     AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database())
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity AS a JOIN pg_catalog.pg_roles AS r ON r.oid = a.usesysid
                      WHERE a.pid = l.pid AND NOT r.rolsuper AND pg_catalog.pg_has_role(r.oid, 'fencegate_runtime', 'MEMBER')))
`
	key := "(" + keyOf("t.name") + ")::bigint"
	held := "EXISTS (SELECT FROM l WHERE l.classid = ((" + key + " >> 32) & 4294967295)::oid AND l.objid = (" + key + " & 4294967295)::oid)"
	// And another row whose name derives the same key, which makes the
	// lock no proof of this election's leader. Verify looks for one as
	// advance_term does (an index probe with an index on the key, else a
	// read through the table); a poll groups the whole table by key once,
	// however many fences it reads.
	s.verifySQL = locks + "SELECT t.term, " + held + ", (SELECT o.name FROM " + s.table + " AS o WHERE " +
		keyOf("o.name") + " = " + keyOf("t.name") + " AND o.name <> t.name LIMIT 1) FROM " + s.table + " AS t WHERE t.name = $1"
	s.pollSQL = locks + ", c AS MATERIALIZED (SELECT " + keyOf("o.name") + " AS k, pg_catalog.array_agg(o.name) AS names FROM " + s.table +
		" AS o GROUP BY 1 HAVING pg_catalog.count(*) > 1)\n" +
		"SELECT t.name, t.term, " + held + ", (SELECT n FROM pg_catalog.unnest(c.names) AS n WHERE n <> t.name LIMIT 1) FROM " +
		s.table + " AS t LEFT JOIN c ON c.k = " + keyOf("t.name") + " WHERE t.name = ANY($1)"
	return s, nil
}

// resolve finds table and checks fencegate_owner's rights on it.
func (s *Source) resolve(ctx context.Context, table string) error {
	var qualified string
	var migrated bool
	if err := s.pool.QueryRow(ctx, "SELECT pg_catalog.to_regprocedure('fencegate.term_table_problem(regclass, boolean)') IS NOT NULL").Scan(&migrated); err != nil {
		return fmt.Errorf("pgterm: %w", err)
	}
	if !migrated {
		return errors.New("pgterm: fencegate.term_table_problem is missing: run fencegate migrate (schema version 12 or later)")
	}
	// Nothing here reads the table: only the catalogs, so that no cast
	// or operator of a type its owner chose runs before it is judged
	// (fencegate.term_table_problem, migration 012, with deep: also what
	// ANALYZE and REINDEX run as its owner, which advance_term skips).
	var sel, upd, owner, login bool
	var problem *string
	err := s.pool.QueryRow(ctx, `
SELECT pg_catalog.format('%I.%I', n.nspname, c.relname),
       fencegate.term_table_problem(c.oid, true),
       EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'fencegate_owner'),
       CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'fencegate_owner')
            THEN pg_catalog.has_table_privilege('fencegate_owner', c.oid, 'SELECT') END,
       CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'fencegate_owner')
            THEN pg_catalog.has_any_column_privilege('fencegate_owner', c.oid, 'UPDATE') END,
       pg_catalog.has_table_privilege(c.oid, 'SELECT')
  FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
 WHERE c.oid = pg_catalog.to_regclass($1)`, table).Scan(&qualified, &problem, &owner, &sel, &upd, &login)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pgterm: term table %q does not exist: create it (CREATE TABLE %s (name text PRIMARY KEY, term bigint NOT NULL)) or name it with --postgres-term-table", table, table)
	case err != nil:
		return fmt.Errorf("pgterm: find term table %q: %w", table, err)
	case !owner:
		return errors.New("pgterm: role fencegate_owner does not exist: run fencegate migrate first")
	case problem != nil:
		// The check reads it as fencegate_owner, and this source as
		// fencegate's login: what reading it runs must be no one else's.
		return fmt.Errorf("pgterm: term table %s %s: fencegate's check could run code another role chose; create it as fencegate_owner or a superuser, (name text PRIMARY KEY, term bigint NOT NULL) with nothing of another role's attached, and grant the workers SELECT, INSERT, UPDATE (never hand over a table a worker made)", qualified, *problem)
	case !sel || !upd:
		return fmt.Errorf("pgterm: fencegate_owner may not read and lock the rows of %s: GRANT SELECT, UPDATE (term) ON %s TO fencegate_owner", qualified, qualified)
	case !login:
		// The source reads the terms as fencegate's login.
		return fmt.Errorf("pgterm: fencegate's login may not read %s: GRANT SELECT ON %s TO <the role of --postgres-dsn>", qualified, qualified)
	}
	s.table = qualified
	return nil
}

// Table is the term table, schema-qualified: what the backend's check
// (fencegate.advance_term) is given.
func (s *Source) Table() string { return s.table }

// LockKey is the lock key derivation.
func (s *Source) LockKey() string { return s.lockKey }

// Close closes the source's connections.
func (s *Source) Close() { s.pool.Close() }

// Term is what was last read of election name, the zero Term for a name
// not followed. Memory only: asking leaves no state, since the gateway
// asks for every write, refused ones (an unauthorized caller's made-up
// names) included.
func (s *Source) Term(name string) election.Term {
	s.mu.RLock()
	t, ok := s.terms[name]
	s.mu.RUnlock()
	if !ok {
		return election.Term{Election: name}
	}
	return t
}

// Verify reads election name's row and whether its lock is held. Every
// number up to the row's term was issued to a leader, so token was held
// when it is at most the term. A name whose row it finds is followed from
// then on (up to a bound); one without a row is not.
func (s *Source) Verify(ctx context.Context, name string, token int64) (election.Term, bool, error) {
	var term int64
	var held bool
	var other *string
	s.mu.Lock()
	high := s.terms[name].Last
	s.reads++
	seq := s.reads
	s.mu.Unlock()
	err := s.pool.QueryRow(ctx, s.verifySQL, name).Scan(&term, &held, &other)
	if errors.Is(err, pgx.ErrNoRows) {
		return election.Term{Election: name}, false, nil
	}
	if err != nil {
		return election.Term{Election: name}, false, fmt.Errorf("pgterm: read term of %q: %w", name, err)
	}
	t := s.store(name, term, held, other, high, seq)
	return t, token <= term, nil
}

// store records a read of name and returns its term. other is another
// election whose name derives name's lock key, nil if none: then the lock
// shows no leader of name's. high is the highest term of the reads that
// had finished as this one started (memory's Last), seq the read's number.
//
// A read that started before the one memory's term is from may have
// seen an older state (a poll begun in the gap between two leaders, done
// after a Verify saw the next one lead) or a newer one: its term and lock
// are not taken, only its Last and what it proves of a rewind. Memory
// then keeps the later read's leader, who would otherwise be refused
// TERM_ENDED until the next poll; a term that ended meanwhile is the
// backend's check's to refuse, as any memory behind PostgreSQL's is.
//
// A term below high went back for certain (this read's snapshot is later
// than that read's): the row was deleted and counted again, restored or
// lowered, and its numbers are handed out again. From then on a term up
// to high is no leader's, whoever holds the lock (its holder's writes are
// TERM_ENDED), as the etcd watcher treats a restored etcd; leaders
// campaign past it. Two reads in flight at once may see states in either
// order, so memory's term alone proves nothing.
func (s *Source) store(name string, term int64, held bool, other *string, high int64, seq uint64) election.Term {
	t := election.Term{Election: name, Last: term}
	if held && other == nil {
		t.Rev = term
	}
	s.mu.Lock()
	floor := s.floors[name]
	if term < high && high > floor { // once per rewind, not per poll until the term passes it
		floor = high
		if _, ok := s.terms[name]; ok {
			s.floors[name] = floor
		}
		s.log.Warn("postgres-term: an election's term went back (its row was deleted, restored or lowered): the terms up to the highest read before are handed out again and are refused TERM_ENDED; leaders holding one must campaign again",
			"election", name, "term", term, "was", high, "refused_up_to", floor, "table", s.table)
	}
	if t.Rev != 0 && t.Rev <= floor {
		t.Rev = 0
	}
	// Only reads that found a row get here, so the names followed are
	// elections some worker created, never names a caller made up.
	old, ok := s.terms[name]
	if ok && seq < s.storedAt[name] {
		old.Last = max(old.Last, term)
		if old.Rev != 0 && old.Rev <= floor {
			old.Rev, old.Leader = 0, ""
			old.Changes++
		}
		s.terms[name] = old
		s.mu.Unlock()
		return old
	}
	follow := ok || len(s.terms) < maxNames
	logFull := !follow && !s.full
	if follow {
		s.storedAt[name] = seq
		t.Last = max(t.Last, old.Last)
		t.Changes = old.Changes
		if t.Rev != old.Rev {
			t.Changes++
		}
		s.terms[name] = t
	} else {
		s.full = true
	}
	logShared := false
	switch was, seen := s.shared[name]; {
	case other == nil:
		delete(s.shared, name)
	case !seen || was != *other:
		if follow {
			s.shared[name] = *other
		}
		logShared = true
	}
	s.mu.Unlock()
	if logFull {
		s.log.Warn("postgres-term: following as many elections as it may: the terms of elections beyond them are read for each of their writes (rate limited as tokens above every known term) and not kept",
			"election", name, "limit", maxNames, "table", s.table)
	}
	if logShared {
		s.log.Warn("postgres-term: two elections share one advisory lock key: neither's term counts as current, and their writes are refused TERM_ENDED; rename one, or use lock key hashtextextended on both sides (workers and --postgres-term-lock-key)",
			"election", name, "shares_key_with", *other, "lock_key", s.lockKey, "table", s.table)
	}
	return t
}

// Terms are the terms of the elections followed, by name.
func (s *Source) Terms() []election.Term {
	s.mu.RLock()
	out := slices.AppendSeq(make([]election.Term, 0, len(s.terms)), maps.Values(s.terms))
	s.mu.RUnlock()
	slices.SortFunc(out, election.CompareTerms)
	return out
}

// Run reads the terms of the elections followed every Config.Poll until
// ctx ends.
func (s *Source) Run(ctx context.Context) error {
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("postgres-term: cannot read the terms", "err", err)
		}
	}
}

// Refresh reads the terms of every election followed, in one query. One
// whose row is gone keeps what was known (and stays followed: its floor
// must outlive the row, or a row counted again from 1 would go unseen).
func (s *Source) Refresh(ctx context.Context) error {
	s.mu.Lock()
	names := slices.Collect(maps.Keys(s.terms))
	highs := make(map[string]int64, len(names))
	for _, name := range names {
		highs[name] = s.terms[name].Last
	}
	s.reads++
	seq := s.reads
	s.mu.Unlock()
	if len(names) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(s.poll, time.Second))
	defer cancel()
	rows, err := s.pool.Query(ctx, s.pollSQL, names)
	if err != nil {
		return fmt.Errorf("pgterm: read terms: %w", err)
	}
	var name string
	var term int64
	var held bool
	var other *string
	_, err = pgx.ForEachRow(rows, []any{&name, &term, &held, &other}, func() error {
		s.store(name, term, held, other, highs[name], seq)
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgterm: read terms: %w", err)
	}
	return nil
}
