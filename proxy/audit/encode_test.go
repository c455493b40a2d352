package audit

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// hostile holds strings a client controls (a fence name, a request id) that
// would break a naive line format.
var hostile = []string{
	``,
	`plain`,
	`"`,
	`\`,
	"line\nbreak",
	"carriage\rreturn",
	"\r\n",
	"nul\x00byte",
	"\x01\x1f\x7f",
	"\b\f\t",
	"bad utf-8 \xff\xfe",
	"cut rune \xe2\x82",
	"\u2028line separator\u2029",
	`</script><script>alert(1)</script> & co`,
	`","principal":"root","outcome":"accepted`,
	"\"}\n{\"time\":\"2000-01-01T00:00:00Z\",\"outcome\":\"accepted\"}",
	"ünïcödé ✓ 🦀",
}

func sampleRecord() Record {
	return Record{
		Time:            time.Date(2026, 3, 4, 5, 6, 7, 891011, time.UTC),
		RequestID:       "req-1",
		Principal:       "spiffe://prod.example/billing/leader",
		Peer:            "10.0.0.7:51234",
		Action:          "sql.write",
		Fence:           "billing",
		Token:           1 << 63,
		Term:            42,
		HighWaterBefore: 41,
		HighWaterAfter:  1<<64 - 1,
		Backend:         "postgres",
		Protocol:        "pgwire",
		Role:            "billing_writer",
		Outcome:         "accepted",
		Rows:            -1,
		Statements:      Fingerprint("UPDATE t SET x = $1"),
		Shadow:          true,
		RolledBack:      true,
	}
}

// TestSampleRecordSetsEveryField: TestAppendRecordIsJSON holds the encoder
// to encoding/json only over the fields sampleRecord sets. A field added
// to Record and not to the encoder (rolled_back was, for a while: a
// rolled-back transaction read as an applied write in the file) fails
// here until sampleRecord sets it, and then there.
func TestSampleRecordSetsEveryField(t *testing.T) {
	v := reflect.ValueOf(sampleRecord())
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("sampleRecord leaves Record.%s empty: set it, so that TestAppendRecordIsJSON covers it", v.Type().Field(i).Name)
		}
	}
}

// TestAppendRecordIsJSON holds the encoder to encoding/json, byte for byte,
// over every string field with every hostile string.
func TestAppendRecordIsJSON(t *testing.T) {
	zone := time.FixedZone("x", -(3*3600 + 30*60))
	records := []Record{
		sampleRecord(),
		{}, // every omitempty field empty, zero time
		{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, zone), Rows: 1 << 62},
	}
	for _, s := range hostile {
		for field := range 10 {
			r := sampleRecord()
			fields := []*string{
				&r.RequestID, &r.Principal, &r.Peer, &r.Action, &r.Fence,
				&r.Backend, &r.Role, &r.Outcome, &r.Statements, &r.Protocol,
			}
			*fields[field] = s
			records = append(records, r)
		}
	}
	for _, r := range records {
		got := appendRecord(nil, &r)
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		if !bytes.Equal(got, want) {
			t.Errorf("appendRecord:\n got %s\nwant %s", got, want)
		}
		checkOneLine(t, got)
	}
}

func checkOneLine(t *testing.T, line []byte) {
	t.Helper()
	if n := bytes.Count(line, []byte{'\n'}); n != 1 || line[len(line)-1] != '\n' {
		t.Errorf("record %q: %d newlines, want exactly one, at the end", line, n)
	}
	if bytes.IndexByte(line, '\r') >= 0 || bytes.Contains(line, []byte("\u2028")) || bytes.Contains(line, []byte("\u2029")) {
		t.Errorf("record %q holds a raw line terminator", line)
	}
}

func TestHostileStringsRoundTrip(t *testing.T) {
	for _, s := range hostile {
		r := sampleRecord()
		r.Fence, r.Principal = s, s
		line := appendRecord(nil, &r)
		checkOneLine(t, line)
		var got Record
		if err := json.Unmarshal(line, &got); err != nil {
			t.Errorf("record with %q: %v", s, err)
			continue
		}
		// Each byte of invalid UTF-8 becomes U+FFFD, as in encoding/json.
		want := string([]rune(s))
		if got.Fence != want || got.Principal != want || got.Outcome != "accepted" {
			t.Errorf("record with %q decoded as fence %q principal %q outcome %q, want %q, %q, accepted",
				s, got.Fence, got.Principal, got.Outcome, want, want)
		}
	}
}

func TestAppendRecordDoesNotAllocate(t *testing.T) {
	r := sampleRecord()
	r.Fence = hostile[len(hostile)-2]
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = appendRecord(buf[:0], &r) }); n != 0 {
		t.Errorf("appendRecord: got %v allocations, want 0", n)
	}
}

func BenchmarkAppendRecord(b *testing.B) {
	r := sampleRecord()
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendRecord(buf[:0], &r)
	}
}

func FuzzAppendRecord(f *testing.F) {
	for _, s := range hostile {
		f.Add(s, s, int64(0))
	}
	f.Fuzz(func(t *testing.T, fence, principal string, rows int64) {
		r := sampleRecord()
		r.Fence, r.Principal, r.Rows = fence, principal, rows
		got := appendRecord(nil, &r)
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if want = append(want, '\n'); !bytes.Equal(got, want) {
			t.Errorf("appendRecord:\n got %s\nwant %s", got, want)
		}
		checkOneLine(t, got)
	})
}

func TestFingerprint(t *testing.T) {
	tests := []struct {
		name string
		a, b []string
	}{
		{"split differently", []string{"ab", "c"}, []string{"a", "bc"}},
		{"an empty part", []string{"a"}, []string{"a", ""}},
		{"no parts and one empty", nil, []string{""}},
		{"order", []string{"a", "b"}, []string{"b", "a"}},
		{"a length forged inside a part", []string{"a", "b"}, []string{"a\x00\x00\x00\x00\x00\x00\x00\x01b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if Fingerprint(tt.a...) == Fingerprint(tt.b...) {
				t.Errorf("Fingerprint(%q) == Fingerprint(%q), want them to differ", tt.a, tt.b)
			}
		})
	}
	// sha256 of 00 00 00 00 00 00 00 03 'a' 'b' 'c', by sha256sum.
	if got, want := Fingerprint("abc"), "c3494ca1a2cf8eeb8a11ded316fb55b83c3bbbedb6313cd50415251e5d09e12f"; got != want {
		t.Errorf("Fingerprint(abc) = %q, want %q", got, want)
	}
}

// TestDigest: a Digest fed part by part gives Fingerprint of the parts,
// again after Reset, and keeps nothing of a part it was given: a
// transaction of any length is fingerprinted in constant memory.
func TestDigest(t *testing.T) {
	var d Digest
	if got, want := d.Sum(), Fingerprint(); got != want {
		t.Errorf("zero Digest: Sum() = %q, want Fingerprint() %q", got, want)
	}
	for _, parts := range [][]string{{"abc"}, {"ab", "c"}, {"", "x", "INSERT INTO t VALUES (1)"}, nil} {
		d.Reset()
		for _, p := range parts {
			d.Add(p)
		}
		if got, want := d.Sum(), Fingerprint(parts...); got != want {
			t.Errorf("Digest of %q: Sum() = %q, want %q", parts, got, want)
		}
	}
	part := strings.Repeat("x", 4096)
	if n := testing.AllocsPerRun(100, func() { d.Add(part) }); n != 0 {
		t.Errorf("Digest.Add allocates %v times, want 0", n)
	}
}
