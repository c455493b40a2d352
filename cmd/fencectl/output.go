package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"unicode/utf8"
)

// printJSON writes v as one line of JSON.
func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// table writes rows under a header, columns aligned.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, shown(c))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// shown is s as a terminal may be given it: quoted and escaped, Go
// syntax, if it holds anything but printable characters and spaces.
// Election names and leader values come from etcd, where any worker that
// may campaign writes them: a control byte or a newline printed as it is
// would run on the operator's terminal or forge a row of the table
// (TestRedTeam25LeaderValueInjectsIntoOperatorTerminal).
func shown(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || r != ' ' && !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// num prints a token, term or high-water mark; 0 is "-": none yet.
func num[T int64 | uint64](n T) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatUint(uint64(n), 10)
}

// orDash prints an empty string as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
