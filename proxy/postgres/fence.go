package postgres

import (
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// Fence is the stored state of one fence.
type Fence struct {
	Name      string
	HighWater tokens.Token
	UpdatedAt time.Time
}
