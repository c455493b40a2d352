package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/fencegate/fencegate/proxy/postgres"
)

const migrateSummary = `Apply fencegate's schema (schema fencegate: the fences table and the check
function) to PostgreSQL and exit. Safe to run again, and from several
replicas at once; serve applies it too on start.`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var dsn string
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.StringVar(&dsn, "postgres-dsn", "", "PostgreSQL connection string (required)")
	if err := parseFlags(fs, args, stdout, stderr, migrateSummary); err != nil {
		return err
	}
	if dsn == "" {
		return errors.New("migrate: --postgres-dsn (or FENCEGATE_POSTGRES_DSN) is required")
	}
	pg, err := postgres.Open(ctx, dsn, postgres.DefaultConfig())
	if err != nil {
		return err
	}
	defer pg.Close()
	from, err := pg.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if err := pg.Migrate(ctx); err != nil {
		return err
	}
	to, err := pg.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if to == from {
		fmt.Fprintf(stdout, "fencegate: schema is up to date (version %d)\n", to)
	} else {
		fmt.Fprintf(stdout, "fencegate: schema migrated from version %d to %d\n", from, to)
	}
	return nil
}
