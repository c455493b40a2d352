package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/fencegate/fencegate/proxy/redis"
	"github.com/fencegate/fencegate/proxy/redis/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

func ExampleBackend_Exec() {
	ctx := context.Background()
	srv, err := throwaway.Start(ctx, throwaway.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	b, err := redis.Open(ctx, srv.Addr(), redis.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	// The leader of term 42 writes; every key carries the fence's hash tag.
	res, err := b.Exec(ctx, "jobs", 42, [][]string{
		{"SET", "{jobs}:last", "7"},
		{"INCR", "{jobs}:count"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res...)

	// The zombie of term 41 is refused, and nothing of its write is applied.
	_, err = b.Exec(ctx, "jobs", 41, [][]string{{"SET", "{jobs}:last", "lost"}})
	fmt.Println(errors.Is(err, tokens.ErrStale), err)

	// A failing command undoes the commands before it.
	_, err = b.Exec(ctx, "jobs", 42, [][]string{
		{"SET", "{jobs}:last", "8"},
		{"LPUSH", "{jobs}:last", "x"},
	})
	r, _ := tokens.AsRefusal(err)
	fmt.Println(r.Reason, r.Metadata["command"])
	res, _ = b.Exec(ctx, "jobs", 42, [][]string{{"GET", "{jobs}:last"}})
	fmt.Println(res...)
	// Output:
	// OK 1
	// true fencegate: STALE_TOKEN: token 41 is below the fence's high-water mark 42
	// STATEMENT_FAILED 1
	// 7
}
