package postgres

import (
	"github.com/fencegate/fencegate/proxy/coalesce"
	"github.com/fencegate/fencegate/tokens"
)

// Concurrent writes are coalesced (package coalesce): writes that arrive
// while every connection slot is busy go out together on the next free
// connection, in one pipeline, each its own implicit transaction ended by
// its own Sync. PostgreSQL runs them one after the other, as it would on
// separate connections, but reads them with one system call and answers
// them with one; fencegate sends and reads them with one each. On this
// project's 2-core machine that about halves PostgreSQL's CPU per
// write (BenchmarkExecCoalesced, docs/BENCHMARKS.md).

// maxBatch bounds the writes sent in one round trip. A larger batch makes
// its last write wait for more transactions ahead of it.
const maxBatch = 16

// call is one fenced write on its way through a batch.
type call struct {
	coalesce.Call
	fence string
	token tokens.Token
	role  string // "" for fencegate's login
	stmts []Statement
	term  TermCheck // the fence's postgres-term check; zero for advance

	// Set by the batch before Finish.
	results []Result
	err     error
}

// advanceSQL returns the fence check c starts with.
func (c *call) advanceSQL() string {
	if c.term.sql != "" {
		if c.role == "" {
			return c.term.sql
		}
		return c.term.asSQL
	}
	if c.role == "" {
		return advanceSQL
	}
	return advanceAsSQL
}

// finish hands the call its outcome.
func (c *call) finish(results []Result, err error) {
	c.results, c.err = results, err
	c.Finish()
}

// submit runs c, alone or in a batch, and returns its outcome.
func (b *Backend) submit(c *call) ([]Result, error) {
	if o := b.co.Do(c); o != coalesce.Finished {
		return nil, coalesce.Refusal(o, c.fence, c.token, b.host, c.Context().Err())
	}
	return c.results, c.err
}
