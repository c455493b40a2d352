package api_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/proxy/redis"
)

// benchClients is the number of concurrent clients of the PostgreSQL
// benchmark, redisBenchClients of the Redis one.
const (
	benchClients      = 16
	redisBenchClients = 50
)

// benchParallelism makes RunParallel, which starts parallelism × GOMAXPROCS
// goroutines, run about n clients.
func benchParallelism(b *testing.B, n int) {
	b.Helper()
	b.SetParallelism(max(1, (n+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0)))
}

// BenchmarkFencedWrite compares a fenced INSERT through fencegate's gRPC API
// with the same fenced batch (fence check + INSERT, one pipelined round
// trip) sent directly with pgx, with 16 clients on distinct fences.
// Compare the two ns/op figures of one run.
func BenchmarkFencedWrite(b *testing.B) {
	ctx := b.Context()
	c, err := pgx.Connect(ctx, pgDSN)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `DROP TABLE IF EXISTS bench_ledger; CREATE TABLE bench_ledger(id bigserial primary key, worker text not null, token bigint not null)`); err != nil {
		b.Fatal(err)
	}
	if err := migrations.Apply(ctx, c); err != nil {
		b.Fatal(err)
	}
	insertSQL := "INSERT INTO bench_ledger(worker, token) VALUES ($1, $2)"

	b.Run("direct-pgx", func(b *testing.B) {
		pool, err := pgxpool.New(ctx, pgDSN)
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		var next atomic.Int64
		benchParallelism(b, benchClients)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			fence := fmt.Sprintf("bench-direct-%d", next.Add(1))
			for pb.Next() {
				batch := &pgx.Batch{}
				batch.Queue("SELECT fencegate.advance($1, $2)", fence, int64(1))
				batch.Queue(insertSQL, fence, int64(1))
				if err := pool.SendBatch(ctx, batch).Close(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})

	b.Run("fencegate-grpc", func(b *testing.B) {
		r := startReplica(b, true)
		cli := newEtcdClient(b)
		// One fence and one leader per client.
		leaders := make([]*leader, benchClients*2)
		for i := range leaders {
			leaders[i] = campaign(b, cli, fmt.Sprintf("bench-grpc-%d", i), "w")
		}
		for i, l := range leaders {
			waitTerm(b, r, fmt.Sprintf("bench-grpc-%d", i), l.token)
		}
		var next atomic.Int64
		benchParallelism(b, benchClients)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)-1) % len(leaders)
			fence := fmt.Sprintf("bench-grpc-%d", i)
			ctx := metadata.AppendToOutgoingContext(ctx, "fencing-token", fmt.Sprint(leaders[i].token))
			req := &fencegatev1.ExecRequest{Fence: fence, Statements: []*fencegatev1.Statement{{
				Sql:    insertSQL,
				Params: []*structpb.Value{structpb.NewStringValue(fence), structpb.NewNumberValue(1)},
			}}}
			for pb.Next() {
				if _, err := r.grpc.Exec(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkRedisFencedSet compares a fenced SET through fencegate's gRPC API
// with the same fencing script run directly with go-redis (the backend's
// Exec, no gateway), with 50 clients on distinct fences.
func BenchmarkRedisFencedSet(b *testing.B) {
	ctx := b.Context()
	b.Run("direct-script", func(b *testing.B) {
		rd, err := redis.Open(ctx, redisAddr, redis.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		defer rd.Close()
		var next atomic.Int64
		benchParallelism(b, redisBenchClients)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			fence := fmt.Sprintf("bench-rdirect-%d", next.Add(1))
			cmds := [][]string{{"SET", "{" + fence + "}:last", "7"}}
			for pb.Next() {
				if _, err := rd.Exec(ctx, fence, 1, cmds); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})

	b.Run("fencegate-grpc", func(b *testing.B) {
		r := startReplica(b, true)
		cli := newEtcdClient(b)
		const fences = redisBenchClients + 14
		leaders := make([]*leader, fences)
		for i := range leaders {
			leaders[i] = campaign(b, cli, fmt.Sprintf("bench-rgrpc-%d", i), "w")
		}
		for i, l := range leaders {
			waitTerm(b, r, fmt.Sprintf("bench-rgrpc-%d", i), l.token)
		}
		var next atomic.Int64
		benchParallelism(b, redisBenchClients)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)-1) % len(leaders)
			fence := fmt.Sprintf("bench-rgrpc-%d", i)
			ctx := metadata.AppendToOutgoingContext(ctx, "fencing-token", fmt.Sprint(leaders[i].token))
			cmd, _ := structpb.NewList([]any{"SET", "{" + fence + "}:last", "7"})
			req := &fencegatev1.RedisRequest{Fence: fence, Commands: []*structpb.ListValue{cmd}}
			for pb.Next() {
				if _, err := r.grpc.Redis(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
