package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/election"
	rdproxy "github.com/fencegate/fencegate/proxy/redis"
)

// backendState is what the backend holds at the end of a run.
type backendState struct {
	// stored is each fence's records in commit order.
	stored map[string][]Record
	// marks is each fence's high-water mark, as fencegate stored it.
	marks map[string]int64
	// stray says what the backend holds that no accepted write made.
	stray []string
}

// fences are the fences the campaign writes: the fence, and the attacks'
// other fence when they run.
func (c *campaign) fences() []string {
	if c.hostile() {
		return []string{c.cfg.Fence, c.otherFence()}
	}
	return []string{c.cfg.Fence}
}

// readBackend reads the records, the marks and anything stray, as the
// superuser (PostgreSQL) or a plain client (Redis), after every writer
// has stopped.
func (c *campaign) readBackend(ctx context.Context) (*backendState, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	st := &backendState{stored: map[string][]Record{}, marks: map[string]int64{}}
	if c.pg != nil {
		return st, c.readPostgres(ctx, st)
	}
	return st, c.readRedis(ctx, st)
}

func (c *campaign) readPostgres(ctx context.Context, st *backendState) error {
	conn, err := pgx.Connect(ctx, c.pg.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, f := range c.fences() {
		rows, _ := conn.Query(ctx, "SELECT id, fence, worker, token, seq FROM ledger WHERE fence = $1 ORDER BY id", f)
		recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) {
			var r Record
			err := row.Scan(&r.Key, &r.Fence, &r.Worker, &r.Token, &r.Seq)
			return r, err
		})
		if err != nil {
			return err
		}
		for i := range recs {
			recs[i].Pos = i
		}
		st.stored[f] = recs
	}
	rows, _ := conn.Query(ctx, "SELECT name, token FROM fencegate.fences")
	var name string
	var token int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &token}, func() error {
		st.marks[name] = token
		return nil
	}); err != nil {
		return err
	}
	// What the attacks would leave if they got through: rows of other
	// fences, rules, extensions, tables (a temporary table ends with its
	// session, which ended with the replicas), settings kept for a role or
	// database.
	ownTables := "'ledger'"
	if c.cfg.Source == election.SourcePostgresTerm {
		ownTables += ", 'leadership_term'" // the election's (source_postgres_term.go)
	}
	strays := []struct{ sql, what string }{
		{"SELECT fence || ': ' || count(*) FROM ledger WHERE fence <> ALL($1) GROUP BY fence", "ledger rows of fence"},
		{"SELECT rulename || ' on ' || schemaname || '.' || tablename FROM pg_rules WHERE schemaname NOT IN ('pg_catalog', 'information_schema')", "rule"},
		{"SELECT extname FROM pg_extension WHERE extname <> 'plpgsql'", "extension"},
		{`SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		  WHERE c.relkind IN ('r', 'v', 'm', 'p', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'fencegate')
		    AND n.nspname NOT LIKE 'pg_temp%' AND n.nspname NOT LIKE 'pg_toast_temp%' AND c.relname NOT IN (` + ownTables + `)`, "table"},
		{"SELECT coalesce(setrole::regrole::text, 'every role') || ': ' || array_to_string(setconfig, ', ') FROM pg_db_role_setting", "setting kept for"},
	}
	for _, q := range strays {
		var args []any
		if strings.Contains(q.sql, "$1") {
			args = []any{c.fences()}
		}
		rows, _ := conn.Query(ctx, q.sql, args...)
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("%s: %w", q.what, err)
		}
		for _, f := range found {
			st.stray = append(st.stray, q.what+" "+f)
		}
	}
	return nil
}

func (c *campaign) readRedis(ctx context.Context, st *backendState) error {
	ledgers := map[string]string{}
	for _, f := range c.fences() {
		ledgers[ledgerKey(f)] = f
		vals, err := c.rdc.LRange(ctx, ledgerKey(f), 0, -1).Result()
		if err != nil {
			return err
		}
		recs := make([]Record, 0, len(vals))
		for i, v := range vals {
			parts := strings.Split(v, ":")
			if len(parts) != 3 {
				return fmt.Errorf("%s element %d: %q is not worker:token:seq", ledgerKey(f), i, v)
			}
			tok, err1 := strconv.ParseInt(parts[1], 10, 64)
			seq, err2 := strconv.ParseInt(parts[2], 10, 64)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("%s element %d: %q is not worker:token:seq", ledgerKey(f), i, v)
			}
			recs = append(recs, Record{Pos: i, Key: int64(i), Fence: f, Worker: parts[0], Token: tok, Seq: seq})
		}
		st.stored[f] = recs
	}
	// Every key is a fence's ledger or mark; anything else is stray.
	iter := c.rdc.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		if _, ok := ledgers[key]; ok {
			continue
		}
		if c.source.ownsKey != nil && c.source.ownsKey(c, key) {
			continue
		}
		if f, ok := markFence(key); ok {
			v, err := c.rdc.Get(ctx, key).Result()
			if err != nil {
				return fmt.Errorf("mark %s: %w", key, err)
			}
			tok, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				st.stray = append(st.stray, fmt.Sprintf("mark %s holds %q", key, v))
				continue
			}
			st.marks[f] = tok
			continue
		}
		st.stray = append(st.stray, "key "+strconv.Quote(key))
	}
	return iter.Err()
}

// markFence returns the fence whose mark key is key, if it is one.
func markFence(key string) (string, bool) {
	name, ok := strings.CutPrefix(key, "fencegate:{")
	if !ok {
		return "", false
	}
	name, ok = strings.CutSuffix(name, "}:token")
	if !ok || name == "" || strings.ContainsAny(name, "{}") || rdproxy.TokenKey(name) != key {
		return "", false
	}
	return name, true
}
