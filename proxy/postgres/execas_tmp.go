package postgres

import (
	"context"

	"github.com/fencegate/fencegate/tokens"
)

// ExecAs is a placeholder until roles land (branch pgroles).
func (b *Backend) ExecAs(ctx context.Context, fence string, t tokens.Token, role string, stmts []Statement) ([]Result, error) {
	return b.Exec(ctx, fence, t, stmts)
}
