package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log"

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
	b, err := postgres.Open(ctx, srv.DSN(), postgres.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	if err := b.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	// Statements are prepared before the batch runs, so a table must exist
	// before the write that uses it.
	if _, err := b.Exec(ctx, "jobs", 42, []postgres.Statement{
		{SQL: "CREATE TABLE jobs(id int PRIMARY KEY, state text)"},
	}); err != nil {
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
