package redislease_test

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/election/redislease"
)

// A worker takes the lease the seed's way; the source reads its term.
func Example() {
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, Protocol: 2})
	defer c.Close()
	src, err := redislease.New(c, redislease.Config{})
	if err != nil {
		panic(err)
	}

	k := src.Keys("example")
	if ok, err := c.SetNX(ctx, k.Lease, "worker-1", 10*time.Second).Result(); err != nil || !ok {
		panic(fmt.Sprint("SET NX: ", ok, err))
	}
	token, err := c.Incr(ctx, k.Counter).Result()
	if err != nil {
		panic(err)
	}

	term, held, err := src.Verify(ctx, "example", token)
	if err != nil {
		panic(err)
	}
	fmt.Println(k.Lease, k.Counter)
	fmt.Println("term", term.Rev, "leader", term.Leader, "held", held)
	// Output:
	// lease:example lease:example:token
	// term 1 leader worker-1 held true
}
