package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	// ok is a valid rule to put the rule under test after.
	const ok = "  - {name: ok, principals: [p], fences: [f], actions: [fence.read]}\n"
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{"empty document", "", "policy: want a mapping holding rules"},
		{"not a mapping", "- a\n", "policy: want a mapping holding rules"},
		{"rules missing", "other: 1\n", `policy: "other": unknown field`},
		{"rules key missing", "{}\n", `policy: rules: missing ("rules: []" denies everything)`},
		{"rules null", "rules:\n", "policy: rules: want a list of rules"},
		{"rules not a list", "rules: {a: b}\n", "policy: rules: want a list of rules"},
		{"yaml syntax", "rules: [\n", "policy: yaml: line 1: did not find expected node content"},
		{"duplicate key", "rules: []\nrules: []\n", `policy: yaml: unmarshal errors: line 2: key "rules" already set in map`},
		{"rule not a mapping", "rules: [x]\n", "policy: rules[0]: want a mapping"},
		{"name missing", "rules:\n" + ok + "  - {principals: [p], fences: [f], actions: [sql.write]}\n", `policy: rules[1] "": name: missing`},
		{"name not a string", "rules:\n  - {name: [a], principals: [p], fences: [f], actions: [sql.write]}\n", `policy: rules[0] "": name: want a string (quote it)`},
		{"duplicate name", "rules:\n" + ok + ok, `policy: rules[1] "ok": name: duplicate of rules[0]`},
		{"unknown field", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], role: r}\n", `policy: rules[0] "a": role: unknown field`},
		{"field in another case", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], Effect: deny}\n", `policy: rules[0] "a": Effect: unknown field`},
		{"duplicate field", "rules:\n  - {name: a, effect: deny, effect: allow, principals: [p], fences: [f], actions: [sql.write]}\n", `policy: yaml: unmarshal errors: line 2: key "effect" already set in map`},
		{"unknown effect", "rules:\n  - {name: a, effect: permit, principals: [p], fences: [f], actions: [sql.write]}\n", `policy: rules[0] "a": effect: unknown effect "permit" (want allow or deny)`},
		{"principals missing", "rules:\n  - {name: a, fences: [f], actions: [sql.write]}\n", `policy: rules[0] "a": principals: empty`},
		{"principals empty", "rules:\n  - {name: a, principals: [], fences: [f], actions: [sql.write]}\n", `policy: rules[0] "a": principals: empty`},
		{"principals not a list", "rules:\n  - {name: a, principals: p, fences: [f], actions: [sql.write]}\n", `policy: rules[0] "a": principals: want a list of strings (quote values YAML reads otherwise: y, no, on, 1.5)`},
		{"principal read as a boolean", "rules:\n  - {name: a, principals: [yes], fences: [f], actions: [sql.write]}\n", `policy: rules[0] "a": principals: want a list of strings (quote values YAML reads otherwise: y, no, on, 1.5)`},
		{"empty principal", "rules:\n  - {name: a, principals: [''], fences: [f], actions: [sql.write]}\n", `policy: rules[0] "a": principals: empty pattern`},
		{"star inside a principal", "rules:\n  - {name: a, principals: ['spiffe://*/x'], fences: [f], actions: [sql.write]}\n", `policy: rules[0] "a": principals: pattern "spiffe://*/x": "*" may only end a pattern`},
		{"two stars", "rules:\n  - {name: a, principals: ['**'], fences: [f], actions: [sql.write]}\n", `policy: rules[0] "a": principals: pattern "**": "*" may only end a pattern`},
		{"fences empty", "rules:\n  - {name: a, principals: [p], fences: [], actions: [sql.write]}\n", `policy: rules[0] "a": fences: empty`},
		{"star first in a fence", "rules:\n  - {name: a, principals: [p], fences: ['*-eu'], actions: [sql.write]}\n", `policy: rules[0] "a": fences: pattern "*-eu": "*" may only end a pattern`},
		{"actions empty", "rules:\n  - {name: a, principals: [p], fences: [f]}\n", `policy: rules[0] "a": actions: empty`},
		{"unknown action", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.read]}\n", `policy: rules[0] "a": actions: unknown action "sql.read" (want sql.write, redis.write, fence.read or fence.admin)`},
		{"action in another case", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [SQL.write]}\n", `policy: rules[0] "a": actions: unknown action "SQL.write" (want sql.write, redis.write, fence.read or fence.admin)`},
		{"role on a deny rule", "rules:\n  - {name: a, effect: deny, principals: [p], fences: [f], actions: [sql.write], postgres_role: r}\n", `policy: rules[0] "a": postgres_role: not allowed on a deny rule`},
		{"role without sql.write", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [redis.write], postgres_role: r}\n", `policy: rules[0] "a": postgres_role: only for a rule granting sql.write`},
		{"role not a string", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: [r]}\n", `policy: rules[0] "a": postgres_role: want a string (quote it)`},
		{"role with a quote", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: 'r\"; DROP'}\n", `policy: rules[0] "a": postgres_role: "r\"; DROP": only letters, digits, "_", "$", "-" and "." are allowed`},
		{"role with a space", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: 'a b'}\n", `policy: rules[0] "a": postgres_role: "a b": only letters, digits, "_", "$", "-" and "." are allowed`},
		{"role not ASCII", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: rôle}\n", `policy: rules[0] "a": postgres_role: "rôle": only letters, digits, "_", "$", "-" and "." are allowed`},
		{"role too long", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: " + strings.Repeat("r", 64) + "}\n", `policy: rules[0] "a": postgres_role: "` + strings.Repeat("r", 64) + `": longer than 63 bytes`},
		{"role pg_", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: pg_read_server_files}\n", `policy: rules[0] "a": postgres_role: "pg_read_server_files": names beginning with pg_ are PostgreSQL's`},
		{"role PG_", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: PG_signal_backend}\n", `policy: rules[0] "a": postgres_role: "PG_signal_backend": names beginning with pg_ are PostgreSQL's`},
		{"role fencegate_owner", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: fencegate_owner}\n", `policy: rules[0] "a": postgres_role: "fencegate_owner": reserved`},
		{"role fencegate_runtime", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: fencegate_runtime}\n", `policy: rules[0] "a": postgres_role: "fencegate_runtime": reserved`},
		{"role none", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: NONE}\n", `policy: rules[0] "a": postgres_role: "NONE": reserved`},
		{"role session_user", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: session_user}\n", `policy: rules[0] "a": postgres_role: "session_user": reserved`},
		{
			"sql.write rule without a role when another has one",
			"rules:\n" +
				"  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: r}\n" +
				"  - {name: x, effect: deny, principals: [p], fences: [g], actions: [sql.write]}\n" +
				"  - {name: b, principals: [q], fences: [g], actions: [redis.write, sql.write]}\n",
			`policy: rules[2] "b": postgres_role: missing: rules[0] names one, so every allow rule granting sql.write must, or its statements would run as fencegate's login role`,
		},
		{
			"the rule without a role comes first",
			"rules:\n" +
				"  - {name: b, principals: [q], fences: [g], actions: [sql.write]}\n" +
				"  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: r}\n",
			`policy: rules[0] "b": postgres_role: missing: rules[1] names one, so every allow rule granting sql.write must, or its statements would run as fencegate's login role`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse = %d rules, want error %q", p.Rules(), tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error:\n got %s\nwant %s", got, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("Parse error %q spans lines, want one", err)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name string
		doc  string
	}{
		{"empty rules", "rules: []\n"},
		{"the API.md example", examplePolicy},
		{"roles at the limits", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: 'A-z_0.9$'}\n" +
			"  - {name: b, principals: [p], fences: [f], actions: [sql.write], postgres_role: " + strings.Repeat("r", 63) + "}\n"},
		{"sql.write without roles anywhere", "rules:\n  - {name: a, principals: ['*'], fences: [f], actions: [sql.write]}\n"},
		{"a deny rule needs no role", "rules:\n  - {name: a, principals: [p], fences: [f], actions: [sql.write], postgres_role: r}\n" +
			"  - {name: b, effect: deny, principals: ['*'], fences: [f], actions: [sql.write]}\n"},
		{"effect allow spelled out", "rules:\n  - {name: a, effect: allow, principals: [p], fences: [f], actions: [fence.read]}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse([]byte(tt.doc)); err != nil {
				t.Errorf("Parse: %v, want nil", err)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(examplePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, want := p.Rules(), 6; got != want {
		t.Errorf("Rules() = %d, want %d", got, want)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules: [x]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	if got, want := errString(err), bad+": policy: rules[0]: want a mapping"; got != want {
		t.Errorf("Load(bad) error = %q, want %q", got, want)
	}

	missing := filepath.Join(dir, "missing.yaml")
	_, err = Load(missing)
	if got, want := errString(err), missing+": policy: open: no such file or directory"; got != want {
		t.Errorf("Load(missing) error = %q, want %q", got, want)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) error %v is not fs.ErrNotExist", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(examplePolicy))
	f.Add([]byte("rules: []\n"))
	f.Add([]byte("rules:\n  - {name: a, principals: ['*'], fences: [b*], actions: [sql.write], postgres_role: r}\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q spans lines", err)
			}
			return
		}
		// Whatever parsed must decide without panicking.
		p.Decide("", "", ActionSQLWrite)
		p.Decide("token:x", "f", ActionFenceRead)
	})
}
