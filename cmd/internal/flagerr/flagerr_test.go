package flagerr

import (
	"errors"
	"flag"
	"io"
	"testing"
	"time"
)

func TestExplain(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--etcd-endpoint=x"}, "unknown flag --etcd-endpoint; did you mean --etcd-endpoints?"},
		{[]string{"-bogus"}, "unknown flag --bogus"},
		{[]string{"--dial-timeout=5"}, `--dial-timeout="5": want a duration such as 500ms, 5s or 1m30s`},
		{[]string{"--workers=many"}, `--workers="many": want an integer`},
		{[]string{"--quick=maybe"}, `--quick="maybe": want true or false`},
		{[]string{"--workers"}, "flag --workers needs a value"},
		{[]string{"--positive=0"}, `--positive="0": want a positive integer`},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("etcd-endpoints", "", "")
		fs.Duration("dial-timeout", time.Second, "")
		fs.Int("workers", 1, "")
		fs.Bool("quick", false, "")
		fs.Func("positive", "", func(string) error { return errors.New("want a positive integer") })
		err := fs.Parse(tc.args)
		if err == nil {
			t.Fatalf("%q: parsed, want an error", tc.args)
		}
		if got := Explain(err, fs); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.args, got, tc.want)
		}
	}
}
