package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/fencegate/fencegate/proxy/postgres"
)

const migrateSummary = `Apply fencegate's schema (schema fencegate: the fences table and the check
function, owned by role fencegate_owner) to PostgreSQL and exit, as a role
that may create schemas and roles. --runtime-role makes the roles fencegate
serves as members of fencegate_runtime, which may run the fence check and
nothing else on fencegate's schema. The PostgreSQL listener's clients log in
as roles of their own, which need no fencegate role (and must not be these).
Safe to run again, and from several replicas at once.`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var dsn string
	var roles []string
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.StringVar(&dsn, "postgres-dsn", "", "an admin's PostgreSQL connection string (required)")
	fs.Func("runtime-role", "comma-separated existing roles that fencegate serves as (their --postgres-dsn users), to grant fencegate_runtime", func(s string) error {
		for _, r := range strings.Split(s, ",") {
			if r = strings.TrimSpace(r); r != "" {
				roles = append(roles, r)
			}
		}
		return nil
	})
	if err := parseFlags(fs, args, stdout, stderr, migrateSummary); err != nil {
		return err
	}
	if dsn == "" {
		return usagef("--postgres-dsn (or FENCEGATE_POSTGRES_DSN) is required: an admin's connection string")
	}
	if err := checkDSN("--postgres-dsn", dsn); err != nil {
		return usage(err)
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
	if err := postgres.MigrateDSN(ctx, dsn, roles...); err != nil {
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
	for _, r := range roles {
		fmt.Fprintf(stdout, "fencegate: role %q may serve fencegate (member of fencegate_runtime)\n", r)
	}
	return nil
}
