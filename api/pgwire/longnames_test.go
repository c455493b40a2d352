package pgwire_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestLongNamesKeyedAsPostgres: PostgreSQL tells prepared statements and
// portals apart by their first 63 bytes, and so must fencegate, or a
// COMMIT reached under a name fencegate never saw made (nil: taken for a
// query of SQL PREPARE's) ends the fenced transaction and what is
// pipelined after it runs unfenced. Each case makes a COMMIT under one
// long name (setup, answered), then reaches it under another that shares
// its first 63 bytes, with an INSERT after it: the row must not land
// unfenced, and, where wantErr, the attack is refused and nothing lands.
func TestLongNamesKeyedAsPostgres(t *testing.T) {
	n63 := strings.Repeat("n", 63)
	one, two := n63+"1", n63+"2"
	insert := func(table string) []pgproto3.FrontendMessage {
		return ext("INSERT INTO " + table + " (v) SELECT 'after:' || " + fencedMark)
	}
	for _, tc := range []struct {
		name    string
		setup   []pgproto3.FrontendMessage
		attack  func(table string) []pgproto3.FrontendMessage
		wantErr bool
	}{
		{
			// A statement name never parsed, bound in a later segment.
			name:  "bind unparsed statement",
			setup: []pgproto3.FrontendMessage{&pgproto3.Parse{Name: one, Query: "COMMIT"}, &pgproto3.Sync{}},
			attack: func(table string) []pgproto3.FrontendMessage {
				return msgs(&pgproto3.Bind{PreparedStatement: two}, &pgproto3.Execute{}, insert(table), &pgproto3.Sync{})
			},
		},
		{
			// The same in the segment that parses the COMMIT.
			name: "bind unparsed statement same segment",
			attack: func(table string) []pgproto3.FrontendMessage {
				return msgs(
					&pgproto3.Parse{Name: one, Query: "COMMIT"},
					&pgproto3.Bind{PreparedStatement: two}, &pgproto3.Execute{},
					insert(table), &pgproto3.Sync{},
				)
			},
		},
		{
			// A portal name never bound, executed.
			name:  "execute unbound portal",
			setup: []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "ln_commit", Query: "COMMIT"}, &pgproto3.Sync{}},
			attack: func(table string) []pgproto3.FrontendMessage {
				return msgs(
					&pgproto3.Bind{DestinationPortal: one, PreparedStatement: "ln_commit"},
					&pgproto3.Execute{Portal: two},
					insert(table), &pgproto3.Sync{},
				)
			},
		},
		{
			// SQL EXECUTE: PostgreSQL cuts the identifier to 63 bytes and
			// finds the statement parsed under the longer name.
			name:  "SQL EXECUTE",
			setup: []pgproto3.FrontendMessage{&pgproto3.Parse{Name: one, Query: "COMMIT"}, &pgproto3.Sync{}},
			attack: func(table string) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Query{
					String: `EXECUTE "` + n63 + `9"; INSERT INTO ` + table + " (v) SELECT 'after:' || " + fencedMark,
				}}
			},
			wantErr: true,
		},
		{
			// SHOW fencegate.token under a name the server holds a COMMIT
			// under is refused (whyLocalName), as under the same name.
			name: "local statement over a long name",
			setup: []pgproto3.FrontendMessage{
				&pgproto3.Parse{Name: one, Query: "COMMIT"}, &pgproto3.Sync{},
			},
			attack: func(string) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Parse{Name: two, Query: "SHOW fencegate.token"}, &pgproto3.Sync{}}
			},
			wantErr: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := "ln_" + strings.ReplaceAll(strings.ToLower(tc.name), " ", "_")
			fence := "ln-" + strings.ReplaceAll(strings.ToLower(tc.name), " ", "-")
			e := newEnv(t, pgwire.Config{})
			e.table(t, table)
			tok, _ := e.lead(t, fence)
			z := e.raw(t, fence, tok)
			if tc.setup != nil {
				z.send(tc.setup...)
				if errs, _, err := z.results(1); err != nil || len(errs) > 0 {
					t.Fatalf("setup: errors %q, %v", errs, err)
				}
			}
			z.send(tc.attack(table)...)
			errs, _, err := z.results(1)
			if err != nil {
				t.Fatalf("attack: %v (errors %q)", err, errs)
			}
			rows := e.values(t, table)
			t.Logf("errors %q; rows %q", errs, rows)
			e.noRows(t, table)
			if !tc.wantErr {
				return
			}
			if len(errs) == 0 || !strings.HasPrefix(errs[0], "FG006") {
				t.Errorf("got errors %q, want FG006 first", errs)
			}
			if len(rows) != 0 {
				t.Errorf("got rows %q, want none", rows)
			}
		})
	}
}
