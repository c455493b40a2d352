package redis

import "github.com/fencegate/fencegate/tokens"

// Fence is the stored state of one fence.
type Fence struct {
	Name      string
	HighWater tokens.Token
}

// TokenKey returns the key holding fence's high-water mark:
// fencegate:{<fence>}:token.
func TokenKey(fence string) string {
	return reservedPrefix + "{" + fence + "}:token"
}
