// Command redigoworker writes with redigo through fencegate's RESP
// listener, as api/resp's TestClientLibraries runs it:
//
//	redigoworker <port> <fence> <token> <auth-token|-> <tag>
//
// It borrows a connection from a redigo Pool (AUTH fence token and CLIENT
// SETNAME as it dials, PING on every borrow), AUTHs again with auth-token
// unless it is -, then writes keys {fence}:<tag>*: plain commands, a
// pipeline (Send, Flush, Receive), MULTI/EXEC, and a Lua script, which
// must be refused. It prints "OK" or "ERR <message>".
package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Println("usage: redigoworker <port> <fence> <token> <auth-token|-> <tag>")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]); err != nil {
		fmt.Println("ERR", err)
		return
	}
	fmt.Println("OK")
}

func run(port, fence, token, authToken, tag string) error {
	pool := &redis.Pool{
		Dial: func() (redis.Conn, error) {
			return redis.Dial("tcp", "127.0.0.1:"+port,
				redis.DialUsername(fence), redis.DialPassword(token),
				redis.DialClientName("redigo-worker"),
				redis.DialConnectTimeout(5*time.Second),
				redis.DialReadTimeout(10*time.Second), redis.DialWriteTimeout(10*time.Second))
		},
		TestOnBorrow: func(c redis.Conn, _ time.Time) error {
			_, err := c.Do("PING")
			return err
		},
		MaxIdle: 1,
	}
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	if err := c.Err(); err != nil {
		return err
	}
	if authToken != "-" {
		if _, err := c.Do("AUTH", fence, authToken); err != nil {
			return err
		}
	}
	k := "{" + fence + "}:" + tag
	if _, err := c.Do("SET", k, "v"); err != nil {
		return err
	}
	if v, err := redis.String(c.Do("GET", k)); err != nil || v != "v" {
		return fmt.Errorf("GET: %q, %v", v, err)
	}

	// A pipeline: both commands in one write, then their replies.
	c.Send("INCR", k+"-n")
	c.Send("HSET", k+"-h", "f", "1")
	if err := c.Flush(); err != nil {
		return err
	}
	for _, want := range []int64{1, 1} {
		n, err := redis.Int64(c.Receive())
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("pipeline: got %d, want %d", n, want)
		}
	}

	// MULTI/EXEC: Do("EXEC") flushes the queued commands and returns
	// EXEC's reply.
	c.Send("MULTI")
	c.Send("RPUSH", k+"-l", "a", "b")
	c.Send("LRANGE", k+"-l", 0, -1)
	r, err := redis.Values(c.Do("EXEC"))
	if err != nil {
		return err
	}
	if len(r) != 2 {
		return fmt.Errorf("EXEC: got %d replies, want 2", len(r))
	}
	if n, err := redis.Int64(r[0], nil); err != nil || n != 2 {
		return fmt.Errorf("EXEC's RPUSH: %v, %v", r[0], err)
	}
	if l, err := redis.Strings(r[1], nil); err != nil || !slices.Equal(l, []string{"a", "b"}) {
		return fmt.Errorf("EXEC's LRANGE: %q, %v", l, err)
	}

	// Scripts cannot be fenced: EVALSHA, then EVAL, both refused.
	_, err = redis.NewScript(0, "return 1").Do(c)
	var re redis.Error
	if !errors.As(err, &re) || !strings.HasPrefix(string(re), "COMMAND_NOT_ALLOWED ") {
		return fmt.Errorf("a Lua script: got %v, want COMMAND_NOT_ALLOWED", err)
	}
	return nil
}
