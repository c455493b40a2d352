package postgres

import (
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// Fence is the stored state of one fence.
type Fence struct {
	Name      string
	HighWater tokens.Token
	// UpdatedAt is when the high-water mark last changed (created or
	// raised), not when the fence was last written.
	UpdatedAt time.Time
}
