package redis

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkExecCoalesced measures 64 concurrent writers, each on its own
// fence, through Backends with 64, 16, 4 and 2 connection slots: the fewer
// slots, the more writes share a round trip (one pipeline). Reported
// besides ns/op: writes per round trip and redis-server's CPU per write.
//
//	go test -run XXX -bench ExecCoalesced -benchtime 5s -count 3 ./proxy/redis/
func BenchmarkExecCoalesced(b *testing.B) {
	const writers = 64
	for _, slots := range []int{64, 16, 4, 2} {
		b.Run(fmt.Sprintf("writers=%d/slots=%d", writers, slots), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.PoolSize = slots
			be, err := Open(b.Context(), server.Addr(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = be.Close() }()
			b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
			cpu0, s0 := processCPU(b, server.PID()), be.Stats()
			b.RunParallel(func(pb *testing.PB) {
				fence := unique("bench")
				cmds := [][]string{{"SET", key(fence, "last"), "7"}}
				for pb.Next() {
					if _, err := be.Exec(b.Context(), fence, 7, cmds); err != nil {
						b.Error(err)
						return
					}
				}
			})
			cpu1, s1 := processCPU(b, server.PID()), be.Stats()
			if trips := s1.Batches - s0.Batches; trips > 0 {
				b.ReportMetric(float64(s1.Calls-s0.Calls)/float64(trips), "writes/trip")
			}
			b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "redis-cpu-µs/op")
		})
	}
}

// processCPU returns a process's CPU seconds (user + system).
func processCPU(tb testing.TB, pid int) float64 {
	tb.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ticks float64
	for _, i := range []int{11, 12} { // utime, stime
		v, _ := strconv.ParseFloat(f[i], 64)
		ticks += v
	}
	return ticks / 100
}
