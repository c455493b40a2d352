package tokens_test

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// parseCases are shared by TestParse and FuzzParse's seed corpus.
var parseCases = []struct {
	name string
	in   string
	want tokens.Token
	err  error
}{
	{name: "one", in: "1", want: 1},
	{name: "typical", in: "42", want: 42},
	{name: "max int64", in: "9223372036854775807", want: math.MaxInt64},
	// Valid on the wire (a uint64), though no etcd revision reaches it.
	{name: "above max int64", in: "9223372036854775808", want: math.MaxInt64 + 1},
	{name: "max uint64", in: "18446744073709551615", want: math.MaxUint64},
	{name: "overflow by one", in: "18446744073709551616", err: tokens.ErrInvalid},
	{name: "overflow 20 digits", in: "99999999999999999999", err: tokens.ErrInvalid},
	{name: "overflow 21 digits", in: "184467440737095516150", err: tokens.ErrInvalid},
	{name: "very long", in: strings.Repeat("9", 1000), err: tokens.ErrInvalid},

	{name: "empty", in: "", err: tokens.ErrMissing},
	{name: "zero", in: "0", err: tokens.ErrInvalid},
	{name: "zeros", in: "00", err: tokens.ErrInvalid},
	{name: "20 zeros", in: strings.Repeat("0", 20), err: tokens.ErrInvalid},

	// Only the canonical form is a token: no leading zeros.
	{name: "leading zero", in: "01", err: tokens.ErrInvalid},
	{name: "leading zeros", in: "007", err: tokens.ErrInvalid},
	{name: "leading zero before 9", in: "09", err: tokens.ErrInvalid},
	{name: "leading zeros to 20 bytes", in: "00000000000000000001", err: tokens.ErrInvalid},
	{name: "leading zeros past 20 bytes", in: "000000000000000000001", err: tokens.ErrInvalid},

	{name: "negative", in: "-1", err: tokens.ErrInvalid},
	{name: "plus sign", in: "+1", err: tokens.ErrInvalid},
	{name: "leading space", in: " 1", err: tokens.ErrInvalid},
	{name: "trailing space", in: "1 ", err: tokens.ErrInvalid},
	{name: "only space", in: " ", err: tokens.ErrInvalid},
	{name: "tab", in: "\t1", err: tokens.ErrInvalid},
	{name: "trailing newline", in: "1\n", err: tokens.ErrInvalid},
	{name: "NUL", in: "1\x00", err: tokens.ErrInvalid},
	{name: "hex prefix", in: "0x2A", err: tokens.ErrInvalid},
	{name: "hex digits", in: "2a", err: tokens.ErrInvalid},
	{name: "octal prefix", in: "0o7", err: tokens.ErrInvalid},
	{name: "binary prefix", in: "0b1", err: tokens.ErrInvalid},
	{name: "underscore", in: "1_000", err: tokens.ErrInvalid},
	{name: "exponent", in: "1e3", err: tokens.ErrInvalid},
	{name: "decimal point", in: "1.0", err: tokens.ErrInvalid},
	{name: "comma", in: "1,2", err: tokens.ErrInvalid},
	{name: "arabic-indic digit", in: "\u0661", err: tokens.ErrInvalid},
	{name: "fullwidth digit", in: "\uff11", err: tokens.ErrInvalid},
	{name: "devanagari digits", in: "\u0967\u0968", err: tokens.ErrInvalid},
	{name: "superscript", in: "1\u00b2", err: tokens.ErrInvalid},
	{name: "invalid utf8", in: "1\xff", err: tokens.ErrInvalid},
	{name: "word", in: "token", err: tokens.ErrInvalid},
}

func TestParse(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tokens.Parse(tc.in)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Parse(%q): got error %v, want %v", tc.in, err, tc.err)
				}
				if got != 0 {
					t.Errorf("Parse(%q): got token %d with error, want 0", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): got error %v, want %d", tc.in, err, tc.want)
			}
			if got != tc.want {
				t.Errorf("Parse(%q): got %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseErrorsAreDistinct(t *testing.T) {
	if errors.Is(tokens.ErrMissing, tokens.ErrInvalid) || errors.Is(tokens.ErrInvalid, tokens.ErrMissing) {
		t.Fatalf("ErrMissing and ErrInvalid match each other")
	}
	for _, err := range []error{tokens.ErrMissing, tokens.ErrInvalid} {
		if !strings.HasPrefix(err.Error(), "tokens: ") {
			t.Errorf("got error string %q, want the %q prefix", err, "tokens: ")
		}
	}
}

func TestTokenString(t *testing.T) {
	tests := []struct {
		tok  tokens.Token
		want string
	}{
		{0, "0"},
		{1, "1"},
		{1234567890, "1234567890"},
		{math.MaxUint64, "18446744073709551615"},
	}
	for _, tc := range tests {
		if got := tc.tok.String(); got != tc.want {
			t.Errorf("Token(%d).String(): got %q, want %q", uint64(tc.tok), got, tc.want)
		}
	}
}

// The header and metadata names are part of the wire contract (API.md).
func TestWireNames(t *testing.T) {
	if tokens.Header != "Fencing-Token" {
		t.Errorf("Header: got %q, want %q", tokens.Header, "Fencing-Token")
	}
	if got := http.CanonicalHeaderKey(tokens.Header); got != tokens.Header {
		t.Errorf("Header is not canonical: got %q, want %q", tokens.Header, got)
	}
	// gRPC metadata keys are lower case.
	if tokens.MetadataKey != "fencing-token" {
		t.Errorf("MetadataKey: got %q, want %q", tokens.MetadataKey, "fencing-token")
	}
}

// FuzzParse checks that Parse accepts exactly the digit strings that denote
// a uint64 > 0 (within its 20-byte limit) and that an accepted token formats
// back to the same number.
func FuzzParse(f *testing.F) {
	for _, tc := range parseCases {
		f.Add(tc.in)
	}
	// What an adversarial test sent: JSON-number and C-literal spellings.
	for _, s := range []string{"12345678901234567", "1e400", "-0", "18446744073709551616", "  42", "+42", "0x10", "42 ", "4\x002"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := tokens.Parse(s)

		allDigits := s != "" && strings.Trim(s, "0123456789") == ""
		n, perr := strconv.ParseUint(s, 10, 64)
		wantOK := allDigits && s[0] != '0' && perr == nil && n > 0

		if err != nil {
			if tok != 0 {
				t.Errorf("Parse(%q): got token %d with error %v, want 0", s, tok, err)
			}
			switch {
			case s == "" && !errors.Is(err, tokens.ErrMissing):
				t.Errorf("Parse(%q): got error %v, want ErrMissing", s, err)
			case s != "" && !errors.Is(err, tokens.ErrInvalid):
				t.Errorf("Parse(%q): got error %v, want ErrInvalid", s, err)
			}
			if wantOK {
				t.Errorf("Parse(%q): got error %v, want %d", s, err, n)
			}
			return
		}

		if !wantOK {
			t.Fatalf("Parse(%q): got %d, want an error", s, tok)
		}
		if uint64(tok) != n {
			t.Fatalf("Parse(%q): got %d, want %d", s, tok, n)
		}
		// Round trip: the token formats back to the same number, which is
		// the input without its leading zeros.
		back := tok.String()
		if want := strings.TrimLeft(s, "0"); back != want {
			t.Errorf("Parse(%q).String(): got %q, want %q", s, back, want)
		}
		again, err := tokens.Parse(back)
		if err != nil || again != tok {
			t.Errorf("Parse(%q) after round trip: got %d, %v, want %d", back, again, err, tok)
		}
	})
}
