package main

import (
	"slices"
	"strings"
	"testing"
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
	h := &History{Ops: map[opID]*Op{}, Elections: map[string]int{}}
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
	h := &History{Ops: map[opID]*Op{}, Elections: map[string]int{}}
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
