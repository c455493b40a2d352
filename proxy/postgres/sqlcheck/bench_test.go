package sqlcheck

import (
	"testing"
	"time"
)

const benchInsert = "INSERT INTO jobs (id, state, payload, updated_at) VALUES ($1, $2, $3, now()) " +
	"ON CONFLICT (id) DO UPDATE SET state = excluded.state, payload = excluded.payload, updated_at = excluded.updated_at"

func BenchmarkCheckCached(b *testing.B) {
	c := newChecker(b, Config{MaxSleep: time.Second})
	if _, err := c.Check(benchInsert); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Check(benchInsert); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckCachedParallel(b *testing.B) {
	c := newChecker(b, Config{MaxSleep: time.Second})
	if _, err := c.Check(benchInsert); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Check(benchInsert); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkCheckUncached(b *testing.B) {
	c := newChecker(b, Config{MaxSleep: time.Second, CacheBytes: -1})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Check(benchInsert); err != nil {
			b.Fatal(err)
		}
	}
}
