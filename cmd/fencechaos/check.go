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

// Kinds of violation found by CheckMarks and CheckHostile, and by the
// campaign's look at the backend's state.
const (
	// KindMarkAboveTerms: a fence's mark in the backend is above every
	// term issued for its election: nobody can have earned it.
	KindMarkAboveTerms = "mark-above-terms"
	// KindMarkMismatch: a fence's mark is not the highest token accepted
	// for it: below a stored write's token, or above the token of every
	// write that may have been applied.
	KindMarkMismatch = "mark-mismatch"
	// KindHostileAccepted: fencegate acknowledged a hostile write that
	// must be refused.
	KindHostileAccepted = "hostile-accepted"
	// KindHostileApplied: a hostile write that must be refused was
	// applied (its records are stored) though its answer was lost.
	KindHostileApplied = "hostile-applied"
	// KindCollateral: an ordinary write, which is always valid, was
	// refused as if it were bad: what a hostile write left behind (a
	// read-only session, a rule, a retyped key) broke it.
	KindCollateral = "collateral-refusal"
	// KindUnauthorizedAccepted: fencegate acknowledged a write sent by a
	// caller the policy does not let write the fence, or with no client
	// certificate: authentication or authorization let it through.
	KindUnauthorizedAccepted = "unauthorized-accepted"
	// KindStray: the backend holds something no accepted write made (a
	// rule, an extension, a key outside the fences, a persistent setting).
	KindStray = "stray-state"
)

// collateralReasons are the refusals an ordinary write never deserves:
// the write is always well-formed and allowed, so these mean something
// changed what it runs against.
var collateralReasons = map[string]bool{
	"STATEMENT_FAILED":    true,
	"INVALID_REQUEST":     true,
	"COMMAND_NOT_ALLOWED": true,
}

// CheckMarks checks every fence's mark in the backend (marks) against the
// writes that may have set it: the mark is the highest token accepted for
// the fence, so it is at least the token of every stored write of the
// fence, at most the token of the highest write not refused, and never
// above the highest term won in the fence's election (h.Terms). A mark of
// a fence nobody wrote is above every term. stored holds each fence's
// stored writes.
func CheckMarks(marks map[string]int64, stored map[string][]Record, h *History) []Violation {
	maxStored := map[string]int64{}
	fences := map[string]bool{}
	for f, recs := range stored {
		for _, r := range recs {
			maxStored[f] = max(maxStored[f], r.Token)
			fences[f] = true
		}
	}
	maxSent := map[string]int64{}
	for _, op := range h.Ops {
		if op.Outcome != Refused {
			maxSent[op.Fence] = max(maxSent[op.Fence], op.Token)
		}
	}
	for f := range marks {
		fences[f] = true
	}
	names := make([]string, 0, len(fences))
	for f := range fences {
		names = append(names, f)
	}
	sort.Strings(names)

	var vs []Violation
	add := func(kind, fence, format string, args ...any) {
		vs = append(vs, Violation{Kind: kind, Fence: fence, Msg: fmt.Sprintf(format, args...)})
	}
	for _, f := range names {
		mark, ok := marks[f]
		switch {
		case !ok:
			add(KindMarkMismatch, f, "no mark, but a write with token %d is stored", maxStored[f])
		case mark > h.Terms[f]:
			add(KindMarkAboveTerms, f, "mark %d is above every term issued for the fence (highest %d)", mark, h.Terms[f])
		case mark < maxStored[f]:
			add(KindMarkMismatch, f, "mark %d is below the token %d of a stored write", mark, maxStored[f])
		case mark > maxSent[f]:
			add(KindMarkMismatch, f, "mark %d is above the token of every write that may have been applied (highest %d)", mark, maxSent[f])
		}
	}
	return vs
}

// CheckHostile checks fence's hostile writes and what they left: no attack
// acknowledged or applied (except abuse, which may be, if harmless), and
// no ordinary write refused for what it ran against (KindCollateral).
// Records of refused attacks that are stored are Check's
// KindRefusedStored.
func CheckHostile(fence string, stored []Record, h *History) []Violation {
	var vs []Violation
	add := func(kind string, op *Op, format string, args ...any) {
		r := Record{Pos: -1, Key: -1, Fence: op.Fence, Worker: op.ID.Worker, Token: op.Token, Seq: op.ID.Seq}
		vs = append(vs, Violation{Kind: kind, Fence: fence, Msg: fmt.Sprintf(format, args...), Records: []Record{r}})
	}
	applied := map[opID]bool{} // lead write of each stored hostile record
	for _, r := range stored {
		if op, ok := h.Ops[r.ID()]; ok && op.hostile() {
			applied[opID{op.ID.Worker, op.ID.Seq - int64(op.Part)}] = true
		}
	}
	ops := make([]*Op, 0, len(h.Ops))
	for _, op := range h.Ops {
		if op.Fence == fence && op.Part == 0 {
			ops = append(ops, op)
		}
	}
	sort.Slice(ops, func(i, j int) bool {
		if ops[i].ID.Worker != ops[j].ID.Worker {
			return ops[i].ID.Worker < ops[j].ID.Worker
		}
		return ops[i].ID.Seq < ops[j].ID.Seq
	})
	for _, op := range ops {
		switch {
		case op.hostile() && op.As != "" && op.Outcome == Acked:
			add(KindUnauthorizedAccepted, op, "attack %s (write %s, token %d) sent as the %s was accepted", op.Attack, op.ID, op.Token, op.As)
		case op.hostile() && !op.Abuse && op.Outcome == Acked:
			add(KindHostileAccepted, op, "attack %s (write %s, token %d) was accepted", op.Attack, op.ID, op.Token)
		case op.hostile() && !op.Abuse && op.Outcome == Unknown && applied[op.ID]:
			add(KindHostileApplied, op, "attack %s (write %s, token %d) was applied; its answer: %s", op.Attack, op.ID, op.Token, op.Reason)
		case !op.hostile() && op.Outcome == Refused && collateralReasons[op.Reason]:
			add(KindCollateral, op, "ordinary write %s (token %d) was refused with %s", op.ID, op.Token, op.Reason)
		}
	}
	return vs
}
