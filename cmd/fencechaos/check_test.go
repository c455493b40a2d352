package main

import (
	"slices"
	"strings"
	"testing"

	rdproxy "github.com/fencegate/fencegate/proxy/redis"
)

// rec is a stored write of fence "f" by worker w.
func rec(w string, token, seq int64) Record {
	return Record{Fence: "f", Worker: w, Token: token, Seq: seq}
}

// op is a write of fence "f" announced by worker w with outcome o.
func op(w string, token, seq int64, o Outcome) *Op {
	return &Op{ID: opID{w, seq}, Fence: "f", Token: token, Outcome: o}
}

func history(ops ...*Op) *History {
	h := newHistory()
	for _, o := range ops {
		h.Ops[o.ID] = o
	}
	return h
}

func kinds(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Kind)
	}
	slices.Sort(out)
	return out
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		stored []Record
		ops    []*Op
		want   []string
	}{
		{
			name: "empty",
		},
		{
			name:   "clean: acked stored, unknown stored or not, refused absent",
			stored: []Record{rec("a", 5, 1), rec("a", 5, 2), rec("b", 9, 1), rec("b", 9, 3)},
			ops: []*Op{
				op("a", 5, 1, Acked), op("a", 5, 2, Unknown), op("a", 5, 3, Refused),
				op("b", 9, 1, Acked), op("b", 9, 2, Unknown), op("b", 9, 3, Unknown),
			},
		},
		{
			name:   "token decreases in commit order",
			stored: []Record{rec("a", 5, 1), rec("b", 9, 1), rec("a", 5, 2)},
			ops:    []*Op{op("a", 5, 1, Acked), op("b", 9, 1, Acked), op("a", 5, 2, Unknown)},
			want:   []string{KindTokenDecrease},
		},
		{
			name:   "stale write after a higher one, not adjacent",
			stored: []Record{rec("b", 9, 1), rec("a", 5, 1), rec("a", 5, 2)},
			ops:    []*Op{op("b", 9, 1, Acked), op("a", 5, 1, Acked), op("a", 5, 2, Acked)},
			want:   []string{KindStaleAfterHigher, KindTokenDecrease},
		},
		{
			name:   "acknowledged write lost",
			stored: []Record{rec("a", 5, 1)},
			ops:    []*Op{op("a", 5, 1, Acked), op("a", 5, 2, Acked)},
			want:   []string{KindLostAck},
		},
		{
			name:   "acknowledged write of another fence is not this fence's loss",
			stored: []Record{rec("a", 5, 1)},
			ops:    []*Op{op("a", 5, 1, Acked), {ID: opID{"z", 1}, Fence: "g", Token: 3, Outcome: Acked}},
		},
		{
			name:   "acknowledged write stored twice",
			stored: []Record{rec("a", 5, 1), rec("a", 5, 1)},
			ops:    []*Op{op("a", 5, 1, Acked)},
			want:   []string{KindDuplicate},
		},
		{
			name:   "unknown write stored twice",
			stored: []Record{rec("a", 5, 1), rec("a", 5, 1)},
			ops:    []*Op{op("a", 5, 1, Unknown)},
			want:   []string{KindDuplicate},
		},
		{
			name:   "refused write stored",
			stored: []Record{rec("a", 5, 1), rec("a", 5, 2)},
			ops:    []*Op{op("a", 5, 1, Acked), op("a", 5, 2, Refused)},
			want:   []string{KindRefusedStored},
		},
		{
			name:   "stored write nobody announced",
			stored: []Record{rec("a", 5, 1), rec("x", 5, 1)},
			ops:    []*Op{op("a", 5, 1, Acked)},
			want:   []string{KindPhantom},
		},
		{
			name:   "stored with another token than sent",
			stored: []Record{rec("a", 6, 1)},
			ops:    []*Op{op("a", 5, 1, Acked)},
			want:   []string{KindPhantom},
		},
		{
			name: "a zombie's refused writes and a lost ack at once",
			stored: []Record{
				rec("a", 5, 1), rec("b", 9, 1), rec("a", 5, 2), rec("b", 9, 2),
			},
			ops: []*Op{
				op("a", 5, 1, Acked), op("b", 9, 1, Acked), op("a", 5, 2, Refused),
				op("b", 9, 2, Acked), op("b", 9, 3, Acked),
			},
			want: []string{KindLostAck, KindRefusedStored, KindTokenDecrease},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.stored {
				tt.stored[i].Pos, tt.stored[i].Key = i, int64(i+1)
			}
			vs := Check("f", tt.stored, history(tt.ops...))
			if got := kinds(vs); !slices.Equal(got, tt.want) {
				t.Errorf("got violations %v, want %v", got, tt.want)
				for _, v := range vs {
					t.Log(v)
				}
			}
			for _, v := range vs {
				if len(v.Records) == 0 {
					t.Errorf("violation %s names no record", v.Kind)
				}
			}
		})
	}
}

func TestViolationPrintsRecords(t *testing.T) {
	stored := []Record{
		{Pos: 0, Key: 10, Fence: "f", Worker: "w1.0", Token: 9, Seq: 4},
		{Pos: 1, Key: 11, Fence: "f", Worker: "w0.0", Token: 5, Seq: 7},
	}
	vs := Check("f", stored, history(op("w1.0", 9, 4, Acked), op("w0.0", 5, 7, Unknown)))
	if len(vs) != 1 {
		t.Fatalf("got %d violations, want 1", len(vs))
	}
	got := vs[0].String()
	for _, want := range []string{"token-decrease", "worker=w1.0 seq=4 token=9", "worker=w0.0 seq=7 token=5", "key 11"} {
		if !strings.Contains(got, want) {
			t.Errorf("got %q, want it to contain %q", got, want)
		}
	}
}

func TestHistoryRead(t *testing.T) {
	lines := strings.Join([]string{
		`{"t":"elect","w":"w0.0","f":"f","tok":5,"at":1}`,
		`{"t":"inv","w":"w0.0","f":"f","tok":5,"seq":1,"at":2}`,
		`{"t":"ok","w":"w0.0","f":"f","seq":1,"at":3}`,
		`{"t":"inv","w":"w0.0","f":"f","tok":5,"seq":2,"z":true,"at":4}`,
		`{"t":"fail","w":"w0.0","f":"f","seq":2,"r":"STALE_TOKEN","at":5}`,
		`{"t":"inv","w":"w0.0","f":"f","tok":5,"seq":3,"at":6}`,
		`{"t":"unk","w":"w0.0","f":"f","seq":3,"r":"deadline","at":7}`,
		`{"t":"inv","w":"w0.0","f":"f","tok":5,"seq":4,"at":8}`,
		`{"t":"ok","w":"w0.0","f":"f","se`, // torn by SIGKILL
	}, "\n")
	h := newHistory()
	if err := h.read(strings.NewReader(lines)); err != nil {
		t.Fatal(err)
	}
	got := h.Counts()
	want := Counts{Ops: 4, Acked: 1, Refused: 1, Unknown: 2, Zombie: 1}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if h.Elections["f"] != 1 {
		t.Errorf("got %d elections, want 1", h.Elections["f"])
	}
	if r := h.Ops[opID{"w0.0", 2}].Reason; r != "STALE_TOKEN" {
		t.Errorf("got reason %q, want STALE_TOKEN", r)
	}
}

// hostileOp is part of attack name by worker w, sent with token, with
// outcome o.
func hostileOp(w, name string, token, seq int64, part int, o Outcome) *Op {
	return &Op{ID: opID{w, seq}, Fence: "f", Token: token, Outcome: o, Attack: name, Part: part}
}

func refusedWith(o *Op, reason string) *Op {
	o.Reason = reason
	return o
}

func TestCheckMarks(t *testing.T) {
	tests := []struct {
		name   string
		marks  map[string]int64
		stored []Record
		ops    []*Op
		terms  map[string]int64
		want   []string
	}{
		{
			name:   "mark is the highest stored token",
			marks:  map[string]int64{"f": 9},
			stored: []Record{rec("a", 5, 1), rec("b", 9, 1)},
			ops:    []*Op{op("a", 5, 1, Acked), op("b", 9, 1, Acked)},
			terms:  map[string]int64{"f": 9},
		},
		{
			name:   "mark raised by a write whose answer was lost and that stored nothing",
			marks:  map[string]int64{"f": 12},
			stored: []Record{rec("a", 5, 1)},
			ops:    []*Op{op("a", 5, 1, Acked), hostileOp("c", "search-path", 12, 1, 0, Unknown)},
			terms:  map[string]int64{"f": 12},
		},
		{
			name:   "mark above every term",
			marks:  map[string]int64{"f": 9223372036854775807},
			stored: []Record{rec("a", 5, 1)},
			ops:    []*Op{op("a", 5, 1, Acked)},
			terms:  map[string]int64{"f": 5},
			want:   []string{KindMarkAboveTerms},
		},
		{
			name:   "mark of a fence nobody wrote",
			marks:  map[string]int64{"f": 5, "other": 3},
			stored: []Record{rec("a", 5, 1)},
			ops:    []*Op{op("a", 5, 1, Acked)},
			terms:  map[string]int64{"f": 5},
			want:   []string{KindMarkAboveTerms},
		},
		{
			name:   "mark below a stored token",
			marks:  map[string]int64{"f": 5},
			stored: []Record{rec("a", 5, 1), rec("b", 9, 1)},
			ops:    []*Op{op("a", 5, 1, Acked), op("b", 9, 1, Acked)},
			terms:  map[string]int64{"f": 9},
			want:   []string{KindMarkMismatch},
		},
		{
			name:   "mark raised by a refused write",
			marks:  map[string]int64{"f": 9},
			stored: []Record{rec("a", 5, 1)},
			ops:    []*Op{op("a", 5, 1, Acked), op("b", 9, 1, Refused)},
			terms:  map[string]int64{"f": 9},
			want:   []string{KindMarkMismatch},
		},
		{
			name:   "no mark for stored writes",
			stored: []Record{rec("a", 5, 1)},
			ops:    []*Op{op("a", 5, 1, Acked)},
			terms:  map[string]int64{"f": 5},
			want:   []string{KindMarkMismatch},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := history(tt.ops...)
			h.Terms = tt.terms
			vs := CheckMarks(tt.marks, map[string][]Record{"f": tt.stored}, h)
			if got := kinds(vs); !slices.Equal(got, tt.want) {
				t.Errorf("got violations %v, want %v", got, tt.want)
				for _, v := range vs {
					t.Log(v)
				}
			}
		})
	}
}

func TestCheckHostile(t *testing.T) {
	tests := []struct {
		name   string
		stored []Record
		ops    []*Op
		want   []string
	}{
		{
			name:   "attacks refused, or lost and not applied",
			stored: []Record{rec("a", 5, 1)},
			ops: []*Op{
				op("a", 5, 1, Acked),
				refusedWith(hostileOp("a", "advance-other", 5, 2, 0, Refused), "INVALID_REQUEST"),
				hostileOp("a", "split-commit", 5, 3, 0, Unknown), hostileOp("a", "split-commit", 5, 4, 1, Unknown),
			},
		},
		{
			name:   "attack accepted",
			stored: []Record{rec("a", 5, 1)},
			ops:    []*Op{op("a", 5, 1, Acked), hostileOp("a", "search-path", 5, 2, 0, Acked)},
			want:   []string{KindHostileAccepted},
		},
		{
			name:   "attack of two records accepted counts once",
			stored: []Record{rec("a", 5, 1), rec("a", 5, 2)},
			ops:    []*Op{hostileOp("a", "split-commit", 5, 1, 0, Acked), hostileOp("a", "split-commit", 5, 2, 1, Acked)},
			want:   []string{KindHostileAccepted},
		},
		{
			name:   "attack applied, its answer lost: its second record shows it",
			stored: []Record{rec("a", 5, 2)},
			ops:    []*Op{hostileOp("a", "split-commit", 5, 1, 0, Unknown), hostileOp("a", "split-commit", 5, 2, 1, Unknown)},
			want:   []string{KindHostileApplied},
		},
		{
			name:   "abuse accepted is no violation",
			stored: []Record{rec("a", 5, 1)},
			ops: []*Op{func() *Op {
				o := hostileOp("a", "generate-series", 5, 1, 0, Acked)
				o.Abuse = true
				return o
			}()},
		},
		{
			name: "ordinary write refused for what an attack left",
			ops: []*Op{
				refusedWith(op("a", 5, 1, Refused), "STATEMENT_FAILED"),
				refusedWith(op("a", 5, 2, Refused), "STALE_TOKEN"),
				refusedWith(op("a", 5, 3, Refused), "BACKEND_UNAVAILABLE"),
			},
			want: []string{KindCollateral},
		},
		{
			name:   "write by the intruder or a stranger accepted",
			stored: []Record{rec("a", 5, 1), rec("a", 5, 2)},
			ops: []*Op{
				func() *Op { o := hostileOp("a", "intruder-write", 5, 1, 0, Acked); o.As = asIntruder; return o }(),
				func() *Op { o := hostileOp("a", "stranger-write", 5, 2, 0, Acked); o.As = asStranger; return o }(),
				func() *Op {
					o := refusedWith(hostileOp("a", "intruder-write", 5, 3, 0, Refused), "NOT_AUTHORIZED")
					o.As = asIntruder
					return o
				}(),
			},
			want: []string{KindUnauthorizedAccepted, KindUnauthorizedAccepted},
		},
		{
			name: "other fences' ops are not this fence's",
			ops: []*Op{
				{ID: opID{"z", 1}, Fence: "g", Token: 3, Outcome: Acked, Attack: "eval"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.stored {
				tt.stored[i].Pos, tt.stored[i].Key = i, int64(i+1)
			}
			vs := CheckHostile("f", tt.stored, history(tt.ops...))
			if got := kinds(vs); !slices.Equal(got, tt.want) {
				t.Errorf("got violations %v, want %v", got, tt.want)
				for _, v := range vs {
					t.Log(v)
				}
			}
			for _, v := range vs {
				if len(v.Records) == 0 {
					t.Errorf("violation %s names no record", v.Kind)
				}
			}
		})
	}
}

// A refused attack whose record is stored is Check's refused-stored, as
// for any write.
func TestCheckRefusedAttackStored(t *testing.T) {
	stored := []Record{rec("a", 5, 1), rec("a", 5, 2)}
	stored[1].Pos = 1
	h := history(op("a", 5, 1, Acked), refusedWith(hostileOp("a", "temp-shadow", 5, 2, 0, Refused), "INVALID_REQUEST"))
	if got, want := kinds(Check("f", stored, h)), []string{KindRefusedStored}; !slices.Equal(got, want) {
		t.Errorf("got violations %v, want %v", got, want)
	}
}

func TestHistoryReadHostile(t *testing.T) {
	lines := strings.Join([]string{
		`{"t":"elect","w":"w0.0","f":"f","tok":5,"at":1}`,
		`{"t":"elect","w":"w1.0","f":"f","tok":9,"at":1}`,
		`{"t":"inv","w":"w0.0","f":"f","tok":5,"seq":1,"at":2}`,
		`{"t":"ok","w":"w0.0","f":"f","seq":1,"at":3}`,
		`{"t":"inv","w":"w0.0","f":"f","tok":5,"seq":2,"a":"split-commit","n":2,"at":4}`,
		`{"t":"inv","w":"w0.0","f":"f","tok":5,"seq":4,"at":5}`,
		`{"t":"fail","w":"w0.0","f":"f","seq":2,"r":"INVALID_REQUEST","at":6}`,
		`{"t":"ok","w":"w0.0","f":"f","seq":4,"at":7}`,
		`{"t":"inv","w":"w0.0","f":"f","tok":5,"seq":5,"a":"search-path","n":1,"at":8}`,
		`{"t":"ok","w":"w0.0","f":"f","seq":5,"at":9}`,
		`{"t":"inv","w":"w0.0","f":"f","tok":5,"seq":6,"a":"sleep","n":1,"ab":true,"at":10}`,
		`{"t":"ok","w":"w0.0","f":"f","seq":6,"at":11}`,
		`{"t":"inv","w":"w0.0","f":"f","tok":5,"seq":7,"a":"intruder-write","n":1,"as":"intruder","at":12}`,
		`{"t":"fail","w":"w0.0","f":"f","seq":7,"r":"NOT_AUTHORIZED","at":13}`,
	}, "\n")
	h := newHistory()
	if err := h.read(strings.NewReader(lines)); err != nil {
		t.Fatal(err)
	}
	got := h.Counts()
	want := Counts{Ops: 2, Acked: 2, Hostile: 4, HostileAccepted: 1}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for seq, want := range map[int64]Outcome{2: Refused, 3: Refused, 4: Acked} {
		op := h.Ops[opID{"w0.0", seq}]
		if op == nil {
			t.Errorf("seq %d: no op", seq)
			continue
		}
		if op.Outcome != want {
			t.Errorf("seq %d: got %v, want %v", seq, op.Outcome, want)
		}
	}
	if p := h.Ops[opID{"w0.0", 3}]; p == nil || p.Attack != "split-commit" || p.Part != 1 || p.Reason != "INVALID_REQUEST" {
		t.Errorf("got second record of the attack %+v, want split-commit part 1 refused INVALID_REQUEST", p)
	}
	if p := h.Ops[opID{"w0.0", 7}]; p == nil || p.As != asIntruder || p.Outcome != Refused {
		t.Errorf("got the intruder's write %+v, want sent as %s, refused", p, asIntruder)
	}
	if h.Terms["f"] != 9 {
		t.Errorf("got highest term %d, want 9", h.Terms["f"])
	}
}

func TestMarkFence(t *testing.T) {
	tests := []struct {
		key    string
		want   string
		wantOK bool
	}{
		{"fencegate:{chaos}:token", "chaos", true},
		{"fencegate:{chaos-other}:token", "chaos-other", true},
		{"fencegate:{}:token", "", false},
		{"fencegate:{a}b}:token", "", false},
		{"fencegate:{chaos}:tokens", "", false},
		{"{chaos}:ledger", "", false},
	}
	for _, tt := range tests {
		got, ok := markFence(tt.key)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("markFence(%q): got %q %v, want %q %v", tt.key, got, ok, tt.want, tt.wantOK)
		}
	}
}

// Every attack carries its records first, so a refused attack that left
// anything shows as a refused write stored.
func TestAttacksCarryRecords(t *testing.T) {
	for _, backend := range []string{"postgres", "redis"} {
		cfg := workerConfig{
			ID: "w0.0", Fence: "chaos", Backend: backend, OtherFence: "chaos-other", HostileP: 1,
			Intruder: tlsFiles{CA: "ca.pem", Cert: "intruder.pem", Key: "intruder-key.pem"},
		}
		a := newAttacker(cfg)
		names := map[string]bool{}
		as := map[string]bool{}
		for _, at := range a.attacks {
			as[at.as] = true
			if names[at.name] {
				t.Errorf("%s: attack %s twice", backend, at.name)
			}
			names[at.name] = true
			req := at.build(cfg, 7, 100)
			var first string
			switch backend {
			case "postgres":
				first = req.stmts[0].sql
				if n := strings.Count(strings.Join(sqls(req), "\n"), ledgerInsert); n != at.rows {
					t.Errorf("%s: got %d records, want rows=%d", at.name, n, at.rows)
				}
			default:
				first = strings.Join(req.cmds[0], " ")
			}
			if want := strings.Join(recordCmd(cfg, 7, 100), " "); backend == "redis" && first != want {
				t.Errorf("%s: got first command %q, want %q", at.name, first, want)
			}
			if backend == "postgres" && first != ledgerInsert {
				t.Errorf("%s: got first statement %q, want the ledger insert", at.name, first)
			}
		}
		for _, who := range []string{asIntruder, asStranger} {
			if !as[who] {
				t.Errorf("%s: no attack sent as the %s", backend, who)
			}
		}
	}
}

func sqls(req request) []string {
	var out []string
	for _, s := range req.stmts {
		out = append(out, s.sql)
	}
	return out
}

func TestSlotTwin(t *testing.T) {
	key := ledgerKey("chaos")
	twin := slotTwin(key)
	if strings.ContainsAny(twin, "{}") {
		t.Errorf("got twin %q, want no hash tag", twin)
	}
	if got, want := rdproxy.Slot(twin), rdproxy.Slot(key); got != want {
		t.Errorf("got slot %d for %q, want %d", got, twin, want)
	}
}
