package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// Decision is the answer to one question: may this principal do this action
// on this fence.
type Decision struct {
	Allowed bool
	// Rule is the name of the deciding rule; "" when no rule matched (the
	// default deny).
	Rule string
	// Role is the postgres_role of the allowing rule when the action is
	// sql.write; "" otherwise, or if the rule names none.
	Role string
}

// Policy is a parsed, validated policy file. It is immutable, so one value
// may serve any number of goroutines.
type Policy struct {
	deny  []rule // deny rules, in file order
	allow []rule // allow rules, in file order
	roles []string
	rules int
}

type rule struct {
	name       string
	principals []pattern
	fences     []pattern
	actions    actionSet
	role       string
}

// pattern is one principal or fence pattern: exact, or a prefix when it
// ended in "*". A lone "*" is the empty prefix, which matches anything,
// including the empty (anonymous) principal.
type pattern struct {
	s      string
	prefix bool
}

func (p pattern) match(s string) bool {
	if p.prefix {
		return strings.HasPrefix(s, p.s)
	}
	return s == p.s
}

func matchAny(ps []pattern, s string) bool {
	for _, p := range ps {
		if p.match(s) {
			return true
		}
	}
	return false
}

type actionSet uint8

func actionBit(a Action) actionSet {
	switch a {
	case ActionSQLWrite:
		return 1 << 0
	case ActionRedisWrite:
		return 1 << 1
	case ActionFenceRead:
		return 1 << 2
	case ActionFenceAdmin:
		return 1 << 3
	}
	return 0
}

func (r *rule) matches(principal, fence string, bit actionSet) bool {
	return r.actions&bit != 0 && matchAny(r.principals, principal) && matchAny(r.fences, fence)
}

// Decide says whether principal may do a on fence. A matching deny rule
// wins over any allow; otherwise the first allow rule in file order that
// matches decides, and for sql.write its postgres_role is the Role. Nothing matching is a
// denial with an empty Rule. An unknown action is always denied. Decide does
// not allocate.
func (p *Policy) Decide(principal, fence string, a Action) Decision {
	bit := actionBit(a)
	if bit == 0 {
		return Decision{}
	}
	for i := range p.deny {
		if r := &p.deny[i]; r.matches(principal, fence, bit) {
			return Decision{Rule: r.name}
		}
	}
	for i := range p.allow {
		if r := &p.allow[i]; r.matches(principal, fence, bit) {
			d := Decision{Allowed: true, Rule: r.name}
			if a == ActionSQLWrite {
				d.Role = r.role
			}
			return d
		}
	}
	return Decision{}
}

// Roles returns every postgres_role the policy names, sorted, each once.
func (p *Policy) Roles() []string {
	return append([]string(nil), p.roles...)
}

// Rules returns the number of rules in the policy.
func (p *Policy) Rules() int {
	return p.rules
}

// Load reads and parses the policy file at path. Its errors start with the
// path.
func Load(path string) (*Policy, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// maxFileSize bounds what a policy file may hold; a real one is kilobytes.
const maxFileSize = 16 << 20

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, pathError(path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, pathError(path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: policy: larger than %d bytes", path, maxFileSize)
	}
	return data, nil
}

// pathError words a file error as "PATH: policy: OP: ERR", keeping ERR for
// errors.Is.
func pathError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return fmt.Errorf("%s: policy: %w", path, err)
}
