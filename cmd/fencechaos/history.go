package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Event types in a worker's history file, one JSON object a line.
const (
	evElect   = "elect" // the worker won a term: Token
	evInvoke  = "inv"   // a write is about to be sent: Token, Seq, Zombie
	evAck     = "ok"    // the write was acknowledged
	evRefused = "fail"  // the write was refused: Reason
	evUnknown = "unk"   // no answer in time, or an answer that does not say: Reason
)

// event is one line of a history file.
type event struct {
	Type   string `json:"t"`
	Worker string `json:"w"`
	Fence  string `json:"f,omitempty"`
	Token  int64  `json:"tok,omitempty"`
	Seq    int64  `json:"seq,omitempty"`
	Zombie bool   `json:"z,omitempty"`
	Reason string `json:"r,omitempty"`
	// Attack names the hostile write an inv announces (hostile.go); Rows
	// is the number of ledger records it carries, with seqs Seq to
	// Seq+Rows-1; Abuse marks an attack that may be accepted if harmless.
	Attack string `json:"a,omitempty"`
	Rows   int    `json:"n,omitempty"`
	Abuse  bool   `json:"ab,omitempty"`
	As     string `json:"as,omitempty"` // whom an attack was sent as besides the worker: asIntruder, asStranger
	At     int64  `json:"at"`           // unix nanoseconds
}

// historyWriter appends events to a file with one write(2) per event, so
// that an event is in the kernel's hands before the request it announces
// is sent: a SIGKILL loses no announced write.
type historyWriter struct {
	mu     sync.Mutex
	f      *os.File
	worker string
	fence  string
}

func createHistory(path, worker, fence string) (*historyWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &historyWriter{f: f, worker: worker, fence: fence}, nil
}

func (h *historyWriter) log(ev event) error {
	ev.Worker, ev.Fence = h.worker, h.fence
	if ev.At == 0 {
		ev.At = time.Now().UnixNano()
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err = h.f.Write(append(b, '\n'))
	return err
}

// outcome records what became of write seq.
func (h *historyWriter) outcome(seq int64, out Outcome, reason string) error {
	typ := evUnknown
	switch out {
	case Acked:
		typ = evAck
	case Refused:
		typ = evRefused
	}
	return h.log(event{Type: typ, Seq: seq, Reason: reason})
}

func (h *historyWriter) Close() error { return h.f.Close() }

// Outcome of one write as its worker saw it.
type Outcome uint8

const (
	// Unknown: the request timed out, the worker died before the answer,
	// or the answer does not say whether the write was applied.
	Unknown Outcome = iota
	// Acked: the write was acknowledged as applied.
	Acked
	// Refused: the write was refused with a reason that says nothing was
	// applied.
	Refused
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Refused:
		return "refused"
	}
	return "unknown"
}

// opID names a write: the worker incarnation that made it and its
// sequence number, unique per incarnation.
type opID struct {
	Worker string
	Seq    int64
}

func (id opID) String() string { return fmt.Sprintf("%s#%d", id.Worker, id.Seq) }

// Op is one write attempt and its outcome. A hostile write that carries
// several ledger records is one Op per record, all with the attack's name
// and outcome; Part numbers them from 0.
type Op struct {
	ID      opID
	Fence   string
	Token   int64
	Zombie  bool
	Outcome Outcome
	Reason  string
	Attack  string // "" for an ordinary write
	Abuse   bool
	As      string // asIntruder, asStranger: sent without the worker's own credentials
	Part    int
}

// hostile reports whether op is (a record of) a hostile write.
func (op *Op) hostile() bool { return op.Attack != "" }

// History is every worker's record of one run.
type History struct {
	Ops map[opID]*Op
	// Elections counts the terms won, per fence.
	Elections map[string]int
	// Terms is the highest term won, per fence: no term above it was ever
	// issued to anyone who wrote.
	Terms map[string]int64
}

func newHistory() *History {
	return &History{Ops: map[opID]*Op{}, Elections: map[string]int{}, Terms: map[string]int64{}}
}

// Counts sums up a history: ordinary writes in the first five, hostile
// writes in the last two.
type Counts struct {
	Ops, Acked, Refused, Unknown, Zombie int
	// Hostile counts hostile writes; HostileAccepted those acknowledged
	// that are not abuse (an abuse attack may be accepted if harmless).
	Hostile, HostileAccepted int
}

// Counts returns the history's totals.
func (h *History) Counts() Counts {
	var c Counts
	for _, op := range h.Ops {
		if op.hostile() {
			if op.Part == 0 {
				c.Hostile++
				if op.Outcome == Acked && !op.Abuse {
					c.HostileAccepted++
				}
			}
			continue
		}
		c.Ops++
		switch op.Outcome {
		case Acked:
			c.Acked++
		case Refused:
			c.Refused++
		default:
			c.Unknown++
		}
		if op.Zombie {
			c.Zombie++
		}
	}
	return c
}

// readHistories reads every *.jsonl file in dir. A torn last line (the
// worker was killed mid-write) is ignored.
func readHistories(dir string) (*History, error) {
	h := newHistory()
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		err = h.read(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return h, nil
}

func (h *History) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // a line torn by SIGKILL
		}
		h.add(ev)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return err
	}
	return nil
}

func (h *History) add(ev event) {
	id := opID{ev.Worker, ev.Seq}
	switch ev.Type {
	case evElect:
		h.Elections[ev.Fence]++
		h.Terms[ev.Fence] = max(h.Terms[ev.Fence], ev.Token)
	case evInvoke:
		for part := range max(ev.Rows, 1) {
			id := opID{ev.Worker, ev.Seq + int64(part)}
			h.Ops[id] = &Op{ID: id, Fence: ev.Fence, Token: ev.Token, Zombie: ev.Zombie, Attack: ev.Attack, Abuse: ev.Abuse, As: ev.As, Part: part}
		}
	case evAck, evRefused, evUnknown:
		op, ok := h.Ops[id]
		if !ok {
			return
		}
		out := Unknown
		switch ev.Type {
		case evAck:
			out = Acked
		case evRefused:
			out = Refused
		}
		op.Outcome, op.Reason = out, ev.Reason
		// The other records of a hostile write share its outcome.
		for seq := id.Seq + 1; ; seq++ {
			next, ok := h.Ops[opID{id.Worker, seq}]
			if !ok || next.Part == 0 {
				break
			}
			next.Outcome, next.Reason = out, ev.Reason
		}
	}
}
