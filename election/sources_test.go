package election

import (
	"context"
	"strings"
	"testing"
)

func TestParseRoutes(t *testing.T) {
	tests := []struct {
		in      string
		want    []Route
		wantErr string
	}{
		{"", nil, ""},
		{"lease-*=monotonic, raft=monotonic,jobs=etcd", []Route{{"lease-*", "monotonic"}, {"raft", "monotonic"}, {"jobs", "etcd"}}, ""},
		{"lease-*", nil, "want PATTERN=KIND"},
		{"=monotonic", nil, "want PATTERN=KIND"},
		{"a*b=monotonic", nil, "'*' only at the end"},
		{"jobs=consul", nil, `unknown kind "consul"`},
	}
	for _, tt := range tests {
		got, err := ParseRoutes(tt.in)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseRoutes(%q): got error %v, want one containing %q", tt.in, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("ParseRoutes(%q): %v", tt.in, err)
		case len(got) != len(tt.want):
			t.Errorf("ParseRoutes(%q): got %v, want %v", tt.in, got, tt.want)
		default:
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("ParseRoutes(%q)[%d]: got %v, want %v", tt.in, i, got[i], tt.want[i])
				}
			}
		}
	}
}

// fixed is a Source that knows one term of every election.
type fixed struct{ rev int64 }

func (f fixed) Term(name string) Term { return Term{Election: name, Rev: f.rev, Last: f.rev} }
func (f fixed) Verify(_ context.Context, name string, _ int64) (Term, bool, error) {
	return f.Term(name), false, nil
}
func (f fixed) Terms() []Term { return []Term{f.Term("jobs"), f.Term("lease-x")} }

func TestRouter(t *testing.T) {
	routes, err := ParseRoutes("lease-keep=etcd,lease-*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(fixed{rev: 3}, routes, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"jobs": "etcd", "lease-keep": "etcd", "lease-a": "monotonic", "lease-": "monotonic", "leas": "etcd"} {
		if got := r.KindOf(name); got != want {
			t.Errorf("KindOf(%q): got %s, want %s", name, got, want)
		}
	}
	if got := r.Term("lease-a"); got.HasLeader() {
		t.Fatalf("a monotonic fence before any token: got %+v, want no term", got)
	}
	ctx := t.Context()
	for _, step := range []struct {
		token, want int64
	}{{5, 5}, {9, 9}, {7, 9}} {
		got, held, err := r.Verify(ctx, "lease-a", step.token)
		if err != nil || !held || got.Rev != step.want {
			t.Fatalf("Verify(lease-a, %d): got %+v, %v, %v; want term %d, held", step.token, got, held, err, step.want)
		}
	}
	if got := r.Term("lease-a").Rev; got != 9 {
		t.Fatalf("Term(lease-a) after tokens 5, 9, 7: got %d, want 9 (terms never go down)", got)
	}
	if got := r.Term("jobs").Rev; got != 3 {
		t.Fatalf("Term(jobs): got %d, want etcd's 3", got)
	}
	var names []string
	for _, tm := range r.Terms() {
		names = append(names, tm.Election)
	}
	// lease-x is etcd's, but a monotonic route takes its name: left out.
	if got := strings.Join(names, ","); got != "jobs,lease-a" {
		t.Fatalf("Terms: got %s, want jobs,lease-a", got)
	}
}

func TestRouterUnconfiguredKind(t *testing.T) {
	routes, err := ParseRoutes("zk-*=zookeeper")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewRouter(fixed{rev: 3}, routes, nil); err == nil || !strings.Contains(err.Error(), "zk-*=zookeeper is not configured") {
		t.Fatalf("a route to a source not configured: got %v, want an error naming it", err)
	}
	r, err := NewRouter(nil, routes, map[string]Source{SourceZooKeeper: fixed{rev: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Term("zk-a").Rev; got != 4 {
		t.Fatalf("Term(zk-a): got %d, want the zookeeper source's 4", got)
	}
	// Without etcd, a fence no route takes has no term, and no token was
	// ever held in it.
	if got, held, err := r.Verify(t.Context(), "jobs", 7); err != nil || held || got.HasLeader() {
		t.Fatalf("Verify(jobs) without etcd: got %+v, %v, %v; want no term, not held", got, held, err)
	}
}

func TestMonotonicLower(t *testing.T) {
	ctx := t.Context()
	m := NewMonotonic()
	if m.Lower("f", 3) {
		t.Fatal("Lower of an unknown fence: got true, want false")
	}
	_, _, _ = m.Verify(ctx, "f", 1000)
	for _, step := range []struct {
		to      int64
		lowered bool
		want    int64
	}{{2000, false, 1000}, {1000, false, 1000}, {8, true, 8}, {0, true, 0}} {
		if got := m.Lower("f", step.to); got != step.lowered {
			t.Fatalf("Lower(f, %d): got %v, want %v", step.to, got, step.lowered)
		}
		if got := m.Term("f").Rev; got != step.want {
			t.Fatalf("after Lower(f, %d): got term %d, want %d", step.to, got, step.want)
		}
	}
	if n := len(m.Terms()); n != 0 {
		t.Fatalf("after Lower(f, 0): got %d terms, want none", n)
	}
}
