//go:build race

package redis

// raceEnabled: under the race detector sync.Pool drops a quarter of what is
// put back, so pooled calls are made anew now and then.
const raceEnabled = true
