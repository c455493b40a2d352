// Command rueidisworker writes with rueidis through fencegate's RESP
// listener, as api/resp's TestClientLibraries runs it:
//
//	rueidisworker <port> <fence> <token> <auth-token|-> <tag>
//
// rueidis speaks RESP3 (HELLO 3 AUTH fence token SETNAME …, then CLIENT
// SETINFO) and pipelines the commands of concurrent callers on one
// connection. Its client-side cache needs CLIENT TRACKING, which
// fencegate does not serve, so the worker sets DisableCache. It AUTHs
// again with auth-token unless it is - (on a dedicated connection, then
// used for every write), then writes keys {fence}:<tag>*: plain commands,
// DoMulti (one pipeline) and MULTI/EXEC. It prints "OK" or
// "ERR <message>".
package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/redis/rueidis"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Println("usage: rueidisworker <port> <fence> <token> <auth-token|-> <tag>")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := run(ctx, os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]); err != nil {
		fmt.Println("ERR", err)
		return
	}
	fmt.Println("OK")
}

// doer is what the writes need of rueidis.Client and DedicatedClient.
type doer interface {
	Do(context.Context, rueidis.Completed) rueidis.RedisResult
	DoMulti(context.Context, ...rueidis.Completed) []rueidis.RedisResult
	B() rueidis.Builder
}

func run(ctx context.Context, port, fence, token, authToken, tag string) error {
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{"127.0.0.1:" + port},
		Username:     fence,
		Password:     token,
		ClientName:   "rueidis-worker",
		DisableCache: true,
		DisableRetry: true,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	if authToken == "-" {
		return write(ctx, c, fence, tag)
	}
	d, done := c.Dedicate()
	defer done()
	if err := d.Do(ctx, d.B().Auth().Username(fence).Password(authToken).Build()).Error(); err != nil {
		return fmt.Errorf("AUTH: %w", err)
	}
	return write(ctx, d, fence, tag)
}

func write(ctx context.Context, c doer, fence, tag string) error {
	b := c.B()
	k := "{" + fence + "}:" + tag
	if err := c.Do(ctx, b.Set().Key(k).Value("v").Build()).Error(); err != nil {
		return err
	}
	if v, err := c.Do(ctx, b.Get().Key(k).Build()).ToString(); err != nil || v != "v" {
		return fmt.Errorf("GET: %q, %v", v, err)
	}
	for i, r := range c.DoMulti(ctx,
		b.Incr().Key(k+"-n").Build(),
		b.Hset().Key(k+"-h").FieldValue().FieldValue("f", "1").Build()) {
		if n, err := r.AsInt64(); err != nil || n != 1 {
			return fmt.Errorf("pipeline's command %d: %d, %v", i, n, err)
		}
	}
	rs := c.DoMulti(ctx,
		b.Multi().Build(),
		b.Rpush().Key(k+"-l").Element("a", "b").Build(),
		b.Lrange().Key(k+"-l").Start(0).Stop(-1).Build(),
		b.Exec().Build())
	for _, r := range rs {
		if err := r.Error(); err != nil {
			return err
		}
	}
	ex, err := rs[3].ToArray()
	if err != nil || len(ex) != 2 {
		return fmt.Errorf("EXEC: %v, %v", ex, err)
	}
	if n, err := ex[0].AsInt64(); err != nil || n != 2 {
		return fmt.Errorf("EXEC's RPUSH: %d, %v", n, err)
	}
	if l, err := ex[1].AsStrSlice(); err != nil || !slices.Equal(l, []string{"a", "b"}) {
		return fmt.Errorf("EXEC's LRANGE: %q, %v", l, err)
	}
	return nil
}
