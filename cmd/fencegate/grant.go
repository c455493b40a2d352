package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/proxy/postgres/pgdsn"
)

const grantSummary = `Let fencegate, logged in to PostgreSQL as the existing role --login, run
callers' statements as the existing role --role (a policy rule's
postgres_role), and exit. --role keeps only its own privileges: it gets
nothing on fencegate's schema, and a role that could reach past its tables
(a superuser, BYPASSRLS, CREATEROLE, a member of fencegate's own roles or of
the login) is refused. Run as an admin after fencegate migrate; safe to run
again.`

func runGrant(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var dsn, login, role string
	fs := flag.NewFlagSet("grant", flag.ContinueOnError)
	fs.StringVar(&dsn, "postgres-dsn", "", "an admin's PostgreSQL connection string (required)")
	fs.StringVar(&login, "login", "", "the existing role fencegate logs in as: the user of serve's --postgres-dsn (required)")
	fs.StringVar(&role, "role", "", "the existing role statements are to run as (required)")
	if err := parseFlags(fs, args, stdout, stderr, grantSummary); err != nil {
		return err
	}
	switch {
	case dsn == "":
		return usagef("--postgres-dsn (or FENCEGATE_POSTGRES_DSN) is required: an admin's connection string")
	case login == "":
		return usagef("--login is required: the role fencegate logs in as")
	case role == "":
		return usagef("--role is required: the role statements are to run as")
	}
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return usagef("--postgres-dsn: %w", pgdsn.ParseError(err))
	}
	host := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("grant: connect to %s: %w", host, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := migrations.GrantRole(ctx, conn, login, role); err != nil {
		return fmt.Errorf("grant on %s: %w", host, err)
	}
	fmt.Fprintf(stdout, "fencegate: login %q may run statements as role %q\n", login, role)
	return nil
}
