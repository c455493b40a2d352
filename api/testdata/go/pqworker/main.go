// Command pqworker writes with lib/pq (database/sql) through fencegate's
// PostgreSQL listener, as api/pgwire's TestDrivers runs it:
//
//	pqworker <port> <fence> <token> <set-token|-> <table> <tag>
//
// It connects with the fence and token in the startup options, SETs
// fencegate.token first unless set-token is -, then writes rows whose v
// starts with tag: statements with arguments (lib/pq prepares each
// unnamed, in a round trip of its own before Bind/Execute), a named
// prepared statement run twice, a serializable transaction, COPY FROM
// STDIN in a transaction (pq.CopyIn), a rolled-back transaction, and a
// string of two statements without arguments (a simple Query). It prints
// "OK <rows with tag>" or "ERR <SQLSTATE> <message>".
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/lib/pq"
)

func main() {
	if len(os.Args) != 7 {
		fmt.Println("usage: pqworker <port> <fence> <token> <set-token|-> <table> <tag>")
		os.Exit(2)
	}
	port, fence, token, setToken, table, tag := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5], os.Args[6]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := run(ctx, port, fence, token, setToken, table, tag)
	var pe *pq.Error
	switch {
	case errors.As(err, &pe):
		fmt.Println("ERR", pe.Code, strings.SplitN(pe.Message, "\n", 2)[0])
	case err != nil:
		fmt.Println("ERR -", err)
	default:
		fmt.Println("OK", n)
	}
}

func run(ctx context.Context, port, fence, token, setToken, table, tag string) (int, error) {
	dsn := fmt.Sprintf("host=127.0.0.1 port=%s user=worker dbname=postgres sslmode=disable options='-c fencegate.fence=%s -c fencegate.token=%s'", port, fence, token)
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	// One connection, so the SET below holds for every statement.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if setToken != "-" {
		if _, err := db.ExecContext(ctx, "SET fencegate.token = '"+setToken+"'"); err != nil {
			return 0, err
		}
	}
	ins := "INSERT INTO " + table + " (v) VALUES ($1)"
	if _, err := db.ExecContext(ctx, ins, tag+"-args"); err != nil {
		return 0, err
	}
	st, err := db.PrepareContext(ctx, ins)
	if err != nil {
		return 0, err
	}
	for _, v := range []string{"-named1", "-named2"} {
		if _, err := st.ExecContext(ctx, tag+v); err != nil {
			return 0, err
		}
	}
	if err := st.Close(); err != nil {
		return 0, err
	}

	err = inTx(ctx, db, &sql.TxOptions{Isolation: sql.LevelSerializable}, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, ins, tag+"-ser")
		return err
	})
	if err != nil {
		return 0, err
	}
	err = inTx(ctx, db, nil, func(tx *sql.Tx) error {
		cp, err := tx.PrepareContext(ctx, pq.CopyIn(table, "v"))
		if err != nil {
			return err
		}
		for i := range 3 {
			if _, err := cp.ExecContext(ctx, fmt.Sprintf("%s-copy%d", tag, i)); err != nil {
				return err
			}
		}
		if _, err := cp.ExecContext(ctx); err != nil { // the end of COPY
			return err
		}
		return cp.Close()
	})
	if err != nil {
		return 0, err
	}
	err = inTx(ctx, db, nil, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, ins, tag+"-rolledback"); err != nil {
			return err
		}
		return errRollback
	})
	if err != errRollback {
		return 0, fmt.Errorf("a transaction rolled back: %w", err)
	}

	q := fmt.Sprintf("INSERT INTO %[1]s (v) VALUES ('%[2]s-s1'); INSERT INTO %[1]s (v) VALUES ('%[2]s-s2')", table, tag)
	if _, err := db.ExecContext(ctx, q); err != nil {
		return 0, err
	}
	var n int
	err = db.QueryRowContext(ctx, "SELECT count(*) FROM "+table+" WHERE v LIKE $1", tag+"-%").Scan(&n)
	return n, err
}

var errRollback = errors.New("rolled back on purpose")

// inTx runs f in a transaction, committed if f returns nil and rolled back
// otherwise.
func inTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, f func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		if rerr := tx.Rollback(); rerr != nil {
			return rerr
		}
		return err
	}
	return tx.Commit()
}
