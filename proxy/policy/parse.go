package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// The fields of a policy file. Keys must match exactly: encoding/json alone
// would also take "Effect" for "effect", and a rule holding both would be
// read as whichever came last.
var (
	topFields  = []string{"rules"}
	ruleFields = []string{"name", "effect", "principals", "fences", "actions", "postgres_role"}
)

// reservedRoles cannot be a rule's postgres_role. Roles beginning with pg_
// belong to PostgreSQL; fencegate's own roles hold its schema; and the
// others are not roles at all in SET ROLE (NONE resets to the login role,
// which holds every rule's role).
var reservedRoles = []string{
	"fencegate_owner", "fencegate_runtime",
	"public", "none", "current_user", "current_role", "session_user",
}

const maxRoleLen = 63 // PostgreSQL's NAMEDATALEN-1

// Parse reads a policy from YAML (API.md, "Authentication and
// authorization"). Unknown and duplicate fields are errors, and so is every
// rule that is not well formed; each error is one line naming the rule and
// the field. "rules: []" is a valid policy that denies everything; a
// document without "rules" is an error, so that a file truncated to nothing
// is not read as deny-all.
func Parse(data []byte) (*Policy, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("policy: %s", oneLine(err))
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return nil, errors.New("policy: want a mapping holding rules")
	}
	if k := unknownKey(top, topFields); k != "" {
		return nil, fmt.Errorf("policy: %q: unknown field", k)
	}
	raw, ok := top["rules"]
	if !ok {
		return nil, errors.New(`policy: rules: missing ("rules: []" denies everything)`)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		return nil, errors.New("policy: rules: want a list of rules")
	}

	rules := make([]rule, len(items))
	deny := make([]bool, len(items))
	seen := make(map[string]int, len(items))
	for i, item := range items {
		if rules[i], deny[i], err = parseRule(i, item); err != nil {
			return nil, err
		}
		name := rules[i].name
		if j, dup := seen[name]; dup {
			return nil, ruleError(i, name, "name", "duplicate of rules[%d]", j)
		}
		seen[name] = i
	}

	sqlWrite := actionBit(ActionSQLWrite)
	withRole := slices.IndexFunc(rules, func(r rule) bool { return r.role != "" })
	p := &Policy{rules: len(rules)}
	for i, r := range rules {
		if deny[i] {
			p.deny = append(p.deny, r)
			continue
		}
		if withRole >= 0 && r.actions&sqlWrite != 0 && r.role == "" {
			return nil, ruleError(i, r.name, "postgres_role",
				"missing: rules[%d] names one, so every allow rule granting sql.write must, or its statements would run as fencegate's login role",
				withRole)
		}
		p.allow = append(p.allow, r)
		if r.role != "" && !slices.Contains(p.roles, r.role) {
			p.roles = append(p.roles, r.role)
		}
	}
	slices.Sort(p.roles)
	return p, nil
}

// parseRule decodes and checks items[i]; deny says it is a deny rule.
func parseRule(i int, item json.RawMessage) (r rule, deny bool, err error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(item, &m); err != nil || m == nil {
		return r, false, fmt.Errorf("policy: rules[%d]: want a mapping", i)
	}
	if raw, ok := m["name"]; ok {
		if err := json.Unmarshal(raw, &r.name); err != nil {
			return r, false, ruleError(i, "", "name", "want a string (quote it)")
		}
	}
	fail := func(field, format string, args ...any) (rule, bool, error) {
		return rule{}, false, ruleError(i, r.name, field, format, args...)
	}
	if k := unknownKey(m, ruleFields); k != "" {
		return fail(k, "unknown field")
	}
	if r.name == "" {
		return fail("name", "missing")
	}

	var effect string
	if raw, ok := m["effect"]; ok {
		if err := json.Unmarshal(raw, &effect); err != nil {
			return fail("effect", "want a string (quote it)")
		}
	}
	switch effect {
	case "", "allow":
	case "deny":
		deny = true
	default:
		return fail("effect", "unknown effect %q (want allow or deny)", effect)
	}

	for _, f := range [...]struct {
		name string
		dst  *[]pattern
	}{{"principals", &r.principals}, {"fences", &r.fences}} {
		list, msg := stringList(m[f.name])
		if msg != "" {
			return fail(f.name, "%s", msg)
		}
		for _, s := range list {
			p, msg := parsePattern(s)
			if msg != "" {
				return fail(f.name, "%s", msg)
			}
			*f.dst = append(*f.dst, p)
		}
	}

	actions, msg := stringList(m["actions"])
	if msg != "" {
		return fail("actions", "%s", msg)
	}
	for _, a := range actions {
		bit := actionBit(Action(a))
		if bit == 0 {
			return fail("actions", "unknown action %q (want %s, %s, %s or %s)",
				a, ActionSQLWrite, ActionRedisWrite, ActionFenceRead, ActionFenceAdmin)
		}
		r.actions |= bit
	}

	if raw, ok := m["postgres_role"]; ok {
		if err := json.Unmarshal(raw, &r.role); err != nil {
			return fail("postgres_role", "want a string (quote it)")
		}
	}
	if r.role != "" {
		switch {
		case deny:
			return fail("postgres_role", "not allowed on a deny rule")
		case r.actions&actionBit(ActionSQLWrite) == 0:
			return fail("postgres_role", "only for a rule granting sql.write")
		}
		if msg := checkRole(r.role); msg != "" {
			return fail("postgres_role", "%s", msg)
		}
	}
	return r, deny, nil
}

func ruleError(i int, name, field, format string, args ...any) error {
	return fmt.Errorf("policy: rules[%d] %q: %s: %s", i, name, field, fmt.Sprintf(format, args...))
}

// stringList decodes a non-empty list of strings, or says what is wrong.
func stringList(raw json.RawMessage) ([]string, string) {
	var list []string
	if raw != nil {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, `want a list of strings (quote values YAML reads otherwise: y, no, on, 1.5)`
		}
	}
	if len(list) == 0 {
		return nil, "empty"
	}
	return list, ""
}

func parsePattern(s string) (pattern, string) {
	if s == "" {
		return pattern{}, "empty pattern"
	}
	if i := strings.IndexByte(s, '*'); i >= 0 && i != len(s)-1 {
		return pattern{}, fmt.Sprintf("pattern %q: \"*\" may only end a pattern", s)
	}
	if prefix, ok := strings.CutSuffix(s, "*"); ok {
		return pattern{s: prefix, prefix: true}, ""
	}
	return pattern{s: s}, ""
}

// checkRole accepts names that need no quoting beyond PostgreSQL's own
// identifier rules, so the role can be spelled in SQL without surprises.
func checkRole(role string) string {
	if len(role) > maxRoleLen {
		return fmt.Sprintf("%q: longer than %d bytes", role, maxRoleLen)
	}
	for i := 0; i < len(role); i++ {
		c := role[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '$' || c == '-' || c == '.'
		if !ok {
			return fmt.Sprintf(`%q: only letters, digits, "_", "$", "-" and "." are allowed`, role)
		}
	}
	lower := strings.ToLower(role)
	if strings.HasPrefix(lower, "pg_") {
		return fmt.Sprintf("%q: names beginning with pg_ are PostgreSQL's", role)
	}
	if slices.Contains(reservedRoles, lower) {
		return fmt.Sprintf("%q: reserved", role)
	}
	return ""
}

// unknownKey returns the first key of m, in sorted order, not in known.
func unknownKey(m map[string]json.RawMessage, known []string) string {
	var bad []string
	for k := range m {
		if !slices.Contains(known, k) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	slices.Sort(bad)
	return bad[0]
}

// oneLine keeps a YAML error on one line: the decoder lists several
// problems on lines of their own.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
