package main

import (
	"fmt"
	"sort"
	"strings"
)

// Record is one write as stored in the backend, in commit order.
type Record struct {
	Pos    int    // position in commit order, from 0
	Key    int64  // the backend's own position: ledger id, list index
	Fence  string // the fence the write was made under
	Worker string
	Token  int64
	Seq    int64
}

func (r Record) ID() opID { return opID{r.Worker, r.Seq} }

func (r Record) String() string {
	return fmt.Sprintf("[pos %d key %d] worker=%s seq=%d token=%d", r.Pos, r.Key, r.Worker, r.Seq, r.Token)
}

// Kinds of violation the checker reports.
const (
	// KindTokenDecrease: a stored write has a lower token than the write
	// stored just before it.
	KindTokenDecrease = "token-decrease"
	// KindStaleAfterHigher: a stored write has a lower token than some
	// earlier stored write, though not the one just before it.
	KindStaleAfterHigher = "stale-after-higher"
	// KindLostAck: an acknowledged write is not stored.
	KindLostAck = "lost-ack"
	// KindDuplicate: a write is stored more than once.
	KindDuplicate = "duplicate"
	// KindRefusedStored: a refused write is stored.
	KindRefusedStored = "refused-stored"
	// KindPhantom: a stored write no worker announced, or stored with
	// another token or fence than it was sent with.
	KindPhantom = "phantom"
)

// Violation is one breach of the safety property, with the records that
// show it.
type Violation struct {
	Kind    string
	Fence   string
	Msg     string
	Records []Record
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "VIOLATION %s fence=%s: %s", v.Kind, v.Fence, v.Msg)
	for _, r := range v.Records {
		fmt.Fprintf(&b, "\n    %s", r)
	}
	return b.String()
}

// Check checks one fence's stored writes, in commit order, against the
// history of every worker:
//
//   - tokens never decrease in commit order (KindTokenDecrease), and no
//     write is stored after a write with a higher token was stored
//     (KindStaleAfterHigher: the same breach seen against the running
//     maximum rather than the neighbour; each stored write is reported
//     under one kind at most);
//   - every acknowledged write is stored exactly once (KindLostAck,
//     KindDuplicate; a write stored twice is reported whatever its
//     outcome, since no worker ever retries one);
//   - no refused write is stored (KindRefusedStored);
//   - every stored write was announced by a worker with the same fence and
//     token (KindPhantom).
//
// Writes with an unknown outcome may be stored or not. Ops of other fences
// in h are ignored.
func Check(fence string, stored []Record, h *History) []Violation {
	var vs []Violation
	add := func(kind, msg string, recs ...Record) {
		vs = append(vs, Violation{Kind: kind, Fence: fence, Msg: msg, Records: recs})
	}

	var maxRec Record
	for i, r := range stored {
		switch {
		case i > 0 && r.Token < stored[i-1].Token:
			add(KindTokenDecrease, fmt.Sprintf("token %d stored right after token %d", r.Token, stored[i-1].Token),
				stored[i-1], r)
		case i > 0 && r.Token < maxRec.Token:
			add(KindStaleAfterHigher, fmt.Sprintf("token %d stored after token %d was stored", r.Token, maxRec.Token),
				maxRec, r)
		}
		if i == 0 || r.Token > maxRec.Token {
			maxRec = r
		}
	}

	seen := make(map[opID][]Record, len(stored))
	for _, r := range stored {
		seen[r.ID()] = append(seen[r.ID()], r)
	}
	ids := make([]opID, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return seen[ids[i]][0].Pos < seen[ids[j]][0].Pos })
	for _, id := range ids {
		recs := seen[id]
		r := recs[0]
		if len(recs) > 1 {
			add(KindDuplicate, fmt.Sprintf("write %s stored %d times", id, len(recs)), recs...)
		}
		op, ok := h.Ops[id]
		switch {
		case !ok:
			add(KindPhantom, fmt.Sprintf("write %s is stored but no worker announced it", id), r)
			continue
		case op.Fence != fence || op.Token != r.Token:
			add(KindPhantom, fmt.Sprintf("write %s was sent to fence %s with token %d", id, op.Fence, op.Token), r)
		}
		if op.Outcome == Refused {
			add(KindRefusedStored, fmt.Sprintf("write %s was refused (%s) but is stored", id, op.Reason), r)
		}
	}

	var lost []*Op
	for id, op := range h.Ops {
		if op.Fence == fence && op.Outcome == Acked && len(seen[id]) == 0 {
			lost = append(lost, op)
		}
	}
	sort.Slice(lost, func(i, j int) bool {
		if lost[i].ID.Worker != lost[j].ID.Worker {
			return lost[i].ID.Worker < lost[j].ID.Worker
		}
		return lost[i].ID.Seq < lost[j].ID.Seq
	})
	for _, op := range lost {
		add(KindLostAck, fmt.Sprintf("write %s (token %d) was acknowledged but is not stored", op.ID, op.Token),
			Record{Pos: -1, Key: -1, Fence: fence, Worker: op.ID.Worker, Token: op.Token, Seq: op.ID.Seq})
	}
	return vs
}
