package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

func ExampleBackend_Exec() {
	ctx := context.Background()
	srv, err := throwaway.Start(ctx, throwaway.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	// As in a deployment: the administrator migrates fencegate's schema
	// and creates the tables; fencegate serves as a role that may write
	// them and only run the fence check on its own schema.
	dsn, err := srv.RuntimeRole(ctx, "app")
	if err != nil {
		log.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE TABLE jobs(id int PRIMARY KEY, state text)"); err != nil {
		log.Fatal(err)
	}
	b, err := postgres.Open(ctx, dsn, postgres.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	if err := b.CheckRole(ctx, false); err != nil {
		log.Fatal(err)
	}

	// The leader of term 42 writes; the zombie of term 41 is refused.
	res, err := b.Exec(ctx, "jobs", 42, []postgres.Statement{
		{SQL: "INSERT INTO jobs VALUES ($1, $2) RETURNING id", Params: []any{float64(7), "done"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res[0].Columns, res[0].Rows)

	_, err = b.Exec(ctx, "jobs", 41, []postgres.Statement{
		{SQL: "UPDATE jobs SET state = $1", Params: []any{"lost"}},
	})
	fmt.Println(errors.Is(err, tokens.ErrStale), err)
	// Output:
	// [id] [[7]]
	// true fencegate: STALE_TOKEN: token 41 is below the fence's high-water mark 42: ERROR: stale fencing token 41 for fence 'jobs': high-water mark is 42 (SQLSTATE FG001)
}
