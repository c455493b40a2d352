// Command gormworker writes with GORM over pgx (gorm.io/driver/postgres)
// through fencegate's PostgreSQL listener, as api/pgwire's TestDrivers
// runs it:
//
//	gormworker <port> <fence> <token> <set-token|-> <table> <tag>
//
// It connects with the fence and token in the startup options, SETs
// fencegate.token first unless set-token is -, then writes rows whose v
// starts with tag: Create in GORM's own transaction (BEGIN, INSERT …
// RETURNING, COMMIT), CreateInBatches, a Transaction with a nested one
// rolled back to its savepoint, SELECT … FOR UPDATE and an Update in one
// transaction, and a Create on a session with prepared statements. It
// prints "OK <rows with tag>" or "ERR <SQLSTATE> <message>".
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"
)

// Row is a row of the test's table: id serial, v text.
type Row struct {
	ID uint
	V  string
}

var errNested = errors.New("rolled back on purpose")

func main() {
	if len(os.Args) != 7 {
		fmt.Println("usage: gormworker <port> <fence> <token> <set-token|-> <table> <tag>")
		os.Exit(2)
	}
	port, fence, token, setToken, table, tag := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5], os.Args[6]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := run(ctx, port, fence, token, setToken, table, tag)
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe):
		fmt.Println("ERR", pe.Code, strings.SplitN(pe.Message, "\n", 2)[0])
	case err != nil:
		fmt.Println("ERR -", err)
	default:
		fmt.Println("OK", n)
	}
}

func run(ctx context.Context, port, fence, token, setToken, table, tag string) (int64, error) {
	dsn := fmt.Sprintf("host=127.0.0.1 port=%s user=worker dbname=postgres sslmode=disable options='-c fencegate.fence=%s -c fencegate.token=%s'", port, fence, token)
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return 0, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return 0, err
	}
	defer sqlDB.Close()
	// One connection, so the SET below holds for every statement.
	sqlDB.SetMaxOpenConns(1)
	db = db.WithContext(ctx)
	if setToken != "-" {
		// SET takes no parameters: the token is a literal.
		if err := db.Exec("SET fencegate.token = '" + setToken + "'").Error; err != nil {
			return 0, err
		}
	}
	rows := db.Table(table)
	if err := rows.Create(&Row{V: tag + "-create"}).Error; err != nil {
		return 0, err
	}
	batch := []Row{{V: tag + "-batch1"}, {V: tag + "-batch2"}, {V: tag + "-batch3"}}
	if err := db.Table(table).CreateInBatches(&batch, 2).Error; err != nil {
		return 0, err
	}
	err = db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Table(table).Create(&Row{V: tag + "-tx1"}).Error; err != nil {
			return err
		}
		err := tx.Transaction(func(tx *gorm.DB) error {
			if err := tx.Table(table).Create(&Row{V: tag + "-nested"}).Error; err != nil {
				return err
			}
			return errNested
		})
		if !errors.Is(err, errNested) {
			return fmt.Errorf("nested transaction: %w", err)
		}
		var r Row
		if err := tx.Table(table).Clauses(clause.Locking{Strength: "UPDATE"}).Where("v = ?", tag+"-create").First(&r).Error; err != nil {
			return err
		}
		return tx.Table(table).Where("id = ?", r.ID).Update("v", tag+"-updated").Error
	})
	if err != nil {
		return 0, err
	}
	prepared := db.Session(&gorm.Session{PrepareStmt: true})
	for _, v := range []string{"-prep1", "-prep2"} {
		if err := prepared.Table(table).Create(&Row{V: tag + v}).Error; err != nil {
			return 0, err
		}
	}
	var n int64
	err = db.Table(table).Where("v LIKE ?", tag+"-%").Count(&n).Error
	return n, err
}
