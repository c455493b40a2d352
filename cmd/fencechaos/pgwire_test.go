package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	pgthrow "github.com/fencegate/fencegate/proxy/postgres/throwaway"
)

func TestPgwireOutcome(t *testing.T) {
	fg := func(code, reason string) error {
		return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "fencegate: " + reason + ": refused"}
	}
	tests := []struct {
		name       string
		err        error
		committing bool
		want       Outcome
		wantReason string
	}{
		{"ok", nil, true, Acked, ""},
		{"stale", fg("FG001", "STALE_TOKEN"), false, Refused, "STALE_TOKEN"},
		{"term ended", fg("FG002", "TERM_ENDED"), false, Refused, "TERM_ENDED"},
		{"unfenceable string", fg("FG006", "INVALID_REQUEST"), true, Refused, "INVALID_REQUEST"},
		{"policy", fg("42501", "NOT_AUTHORIZED"), false, Refused, "NOT_AUTHORIZED"},
		{"bad token at start", &pgconn.PgError{Severity: "FATAL", Code: "FG004", Message: "fencegate: INVALID_TOKEN: x"}, false, Refused, "INVALID_TOKEN"},
		{"database refused the statement", &pgconn.PgError{Severity: "ERROR", Code: "42501", Message: "permission denied for table ledger"}, true, Refused, "STATEMENT_FAILED"},
		{"read-only session", &pgconn.PgError{Severity: "ERROR", Code: "25006", Message: "cannot execute INSERT in a read-only transaction"}, false, Refused, "STATEMENT_FAILED"},
		{"connection lost before COMMIT", io.ErrUnexpectedEOF, false, Refused, "CONNECTION_LOST before COMMIT"},
		{"timeout before COMMIT", context.DeadlineExceeded, false, Refused, "TIMEOUT before COMMIT"},
		{"connection lost on COMMIT", io.ErrUnexpectedEOF, true, Unknown, "CONNECTION_LOST (outcome unknown)"},
		{"timeout on COMMIT", context.DeadlineExceeded, true, Unknown, "TIMEOUT (outcome unknown)"},
		{"ended with its term, rolled back", &pgconn.PgError{Severity: "FATAL", Code: "FG001", Message: "fencegate: STALE_TOKEN: token 2 is below the current term 4; its open transaction is rolled back and the connection closed"}, true, Refused, "STALE_TOKEN"},
		{"ended with its term, COMMIT in flight", &pgconn.PgError{Severity: "FATAL", Code: "FG002", Message: "fencegate: TERM_ENDED: term 2 of election \"chaos\" is over and no leader holds it; its open transaction is ended and the connection closed (a COMMIT already sent may have committed)"}, true, Unknown, "TERM_ENDED (outcome unknown)"},
		{"shutdown on COMMIT", &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}, true, Unknown, "SQLSTATE 57P01 (outcome unknown)"},
		// pgconn calls a read on a connection it closed after the
		// COMMIT went out safe to retry.
		{"safe to retry on COMMIT", safeToRetryError{}, true, Unknown, "CONNECTION_LOST (outcome unknown)"},
		{"safe to retry before COMMIT", safeToRetryError{}, false, Refused, "CONNECTION_LOST before COMMIT"},
		{"COMMIT answered ROLLBACK", pgx.ErrTxCommitRollback, true, Refused, "ROLLED_BACK"},
		{"TLS handshake refused", errors.New("failed to connect: remote error: tls: certificate required"), false, Refused, reasonTLSRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := pgwireOutcome(tt.err, tt.committing)
			if got != tt.want || reason != tt.wantReason {
				t.Errorf("got %v %q, want %v %q", got, reason, tt.want, tt.wantReason)
			}
		})
	}
}

// safeToRetryError is what pgconn returns when the connection was closed
// under the reader: "conn closed", safe to retry.
type safeToRetryError struct{}

func (safeToRetryError) Error() string     { return "conn closed" }
func (safeToRetryError) SafeToRetry() bool { return true }

func TestInlineParams(t *testing.T) {
	st := stmt{sql: "INSERT INTO t VALUES ($1, $2, $10)", params: []any{"it's", int64(-3), "", "", "", "", "", "", "", "ten"}}
	got := inlineParams(st)
	want := "INSERT INTO t VALUES ('it''s', -3, 'ten')"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestCheckProtocol(t *testing.T) {
	tests := []struct {
		backend, protocol string
		http              float64
		wantProtocol      string
		wantHTTP          float64
		wantErr           string
	}{
		{"postgres", "grpc+http", 0.5, "grpc+http", 0.5, ""},
		{"redis", "mixed", 0.3, "grpc+http", 0.3, ""},
		{"redis", "grpc", 0.5, "grpc", 0, ""},
		{"postgres", "http", 0.5, "http", 1, ""},
		{"postgres", "pgwire", 0.5, "pgwire", 0.5, ""},
		{"redis", "pgwire", 0.5, "", 0, "--protocol=pgwire needs --backend=postgres"},
		{"redis", "resp", 0.5, "resp", 0.5, ""},
		{"postgres", "resp", 0.5, "", 0, "--protocol=resp needs --backend=redis"},
		{"postgres", "jdbc", 0.5, "", 0, `--protocol "jdbc": want`},
		{"postgres", "grpc+http", 1.5, "", 0, "--http 1.5: want a probability"},
	}
	for _, tt := range tests {
		cfg := campaignConfig{Backend: tt.backend, Protocol: tt.protocol, HTTPP: tt.http}
		err := checkProtocol(&cfg)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s %s: got error %v, want one containing %q", tt.backend, tt.protocol, err, tt.wantErr)
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s %s: got error %v, want none", tt.backend, tt.protocol, err)
		case tt.wantErr == "" && (cfg.Protocol != tt.wantProtocol || cfg.HTTPP != tt.wantHTTP):
			t.Errorf("%s %s: got protocol %s, http %v, want %s, %v", tt.backend, tt.protocol, cfg.Protocol, cfg.HTTPP, tt.wantProtocol, tt.wantHTTP)
		}
	}
}

// TestPgwireSenderDirect runs a control-mode pgwire sender against a real
// PostgreSQL as the campaign's pgwire login: a record is acknowledged and
// stored; a write whose transaction times out before its COMMIT is
// refused and nothing of it is stored; a refused statement of a Query
// string takes the whole string with it.
func TestPgwireSenderDirect(t *testing.T) {
	ctx := t.Context()
	pg, err := pgthrow.Start(ctx, pgthrow.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	admin, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, ledgerDDL); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.RuntimeRole(ctx, "fencegate_chaos"); err != nil { // fencegate's schema, as the campaign has it
		t.Fatal(err)
	}
	dsn, err := createPgwireLogin(ctx, admin, pg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := workerConfig{ID: "w0.0", Fence: "chaos", Backend: "postgres", Protocol: protoPgwire, PgLoginDSN: dsn, Timeout: time.Second, Seed: 1}
	s, err := newPgwireSender(cfg, tlsFiles{}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	send := func(timeout time.Duration, req request) (Outcome, string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return s.send(wctx, 3, req)
	}
	stored := func(seq int64) bool {
		t.Helper()
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM ledger WHERE worker = 'w0.0' AND seq = $1", seq).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	tests := []struct {
		name       string
		timeout    time.Duration
		req        request
		want       Outcome
		wantReason string
		wantStored bool
	}{
		{"record", time.Second, recordRequest(cfg, 3, 1), Acked, "", true},
		{
			"timeout before COMMIT", 300 * time.Millisecond,
			request{stmts: []stmt{recordStmt(cfg, 3, 2), {sql: "SELECT pg_sleep(5)"}}},
			Refused, "TIMEOUT before COMMIT", false,
		},
		{
			"refused statement in a Query string", time.Second,
			request{simple: true, stmts: []stmt{recordStmt(cfg, 3, 3), {sql: "CREATE RULE r AS ON INSERT TO ledger DO INSTEAD NOTHING"}}},
			Refused, "STATEMENT_FAILED", false,
		},
		{"after the timeout, a new connection", time.Second, recordRequest(cfg, 3, 4), Acked, "", true},
	}
	for i, tt := range tests {
		got, reason := send(tt.timeout, tt.req)
		if got != tt.want || reason != tt.wantReason {
			t.Errorf("%s: got %v %q, want %v %q", tt.name, got, reason, tt.want, tt.wantReason)
		}
		if st := stored(int64(i + 1)); st != tt.wantStored {
			t.Errorf("%s: got stored %v, want %v", tt.name, st, tt.wantStored)
		}
	}
}

// TestPgwireAttacksCarryTheirRecords: every pgwire attack goes as one
// Query string carrying its rows' records, seqs seq to seq+rows-1, so a
// refused attack that left anything shows as a refused write stored.
func TestPgwireAttacksCarryTheirRecords(t *testing.T) {
	cfg := workerConfig{ID: "w1.2", Fence: "chaos", Backend: "postgres", Protocol: protoPgwire}
	for _, at := range pgwireAttacks("chaos-other") {
		req := at.build(cfg, 7, 100)
		if !req.simple {
			t.Errorf("%s: got an explicit transaction, want one Query string", at.name)
		}
		var sqls []string
		for _, st := range req.stmts {
			sqls = append(sqls, inlineParams(st))
		}
		q := strings.Join(sqls, ";\n")
		if got := strings.Count(q, "INSERT INTO ledger"); got != at.rows {
			t.Errorf("%s: got %d records, want %d in %q", at.name, got, at.rows, q)
		}
		for i := range at.rows {
			rec := inlineParams(recordStmt(cfg, 7, 100+int64(i)))
			if !strings.Contains(q, rec) {
				t.Errorf("%s: got %q, want record %q in it", at.name, q, rec)
			}
		}
	}
}
