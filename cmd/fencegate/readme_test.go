package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/election/freeport"
)

// walkthroughHeadings are the README sections whose ```sh blocks
// TestREADMEWalkthrough runs, in this order; the later ones use what the
// first defines (leader_term).
var walkthroughHeadings = []string{
	"## Two minutes: a zombie leader refused",
	"## Drop-in PostgreSQL: psql writes through fencegate",
	"## Drop-in Redis: redis-cli writes through fencegate",
}

// readmeBlock is one fenced code block of the walkthrough.
type readmeBlock struct {
	section string // the ### heading it is under, or its ## heading before the first
	n       int    // its place among the section's sh blocks, from 1
	lang    string
	code    string
}

func (b readmeBlock) name() string { return fmt.Sprintf("%q block %d", b.section, b.n) }

// walkthroughWants is what each sh block must print, pattern after
// pattern, each matched after the previous one. A pattern is a regular
// expression in which {NAME} stands for a number: the first {NAME} of a
// run matches any number and binds it, later ones match only that number.
var walkthroughWants = map[string][]string{
	`"Two minutes: a zombie leader refused" block 1`: {`^$`},
	`"PostgreSQL" block 1`: {
		`CREATE TABLE\n`,
		`worker-1 leads with token {T1}\n`,
		`"CreateRevision" : {T1}\n`,
		`"token": ?"{T1}".*"rowsAffected": ?"1".*  HTTP 200\n`,
	},
	`"PostgreSQL" block 2`: {
		`worker-2 leads with token {T2}\n`,
		`STALE_TOKEN: token {T1} is below the current term {T2}".*  HTTP 409\n`,
		` 1 \| billed\n\(1 row\)\n`,
		`fencegate_election_term\{election="jobs"\} {T2}\n`,
		`fencegate_rejections_total\{fence="jobs",reason="stale_token"\} 1\n`,
	},
	`"The same with Redis" block 1`: {
		`worker-3 leads with token {T3}\n`,
		`"token": ?"{T3}", ?"results": ?\["OK", ?1\]\}  HTTP 200\n`,
	},
	`"The same with Redis" block 2`: {
		`worker-4 leads with token {T4}\n`,
		`"token": ?"{T4}", ?"results": ?\["OK"\]\}  HTTP 200\n`,
		`STALE_TOKEN: token {T3} is below the fence's high-water mark {T4}".*"highWater": ?"{T4}".*  HTTP 409\n`,
		`(?m)^8\n{T4}\n`,
		`COMMAND_NOT_ALLOWED: command 0: FLUSHALL.*  HTTP 403\n`,
	},
	`"gRPC" block 1`: {
		`worker-5 leads with token {T5}\n`,
		`"token": "{T5}",\n  "results": \[\n    \{\n      "rowsAffected": "1"`,
		`"token": "{T5}",\n  "results": \[\n    \d+\n  \]`,
		`"name": "jobs",\n      "highWater": "{T5}",\n      "term": "{T5}",\n      "leader": "worker-5"`,
		`"status": "SERVING"`,
		`Code: Aborted\n  Message: fencegate: TERM_ENDED: term {T5} of election "jobs" is over`,
		`grpcurl: exit status 74\n`,
	},
	`"Drop-in Redis: redis-cli writes through fencegate" block 1`: {
		`worker-10 leads with token {T10}\n`,
		`OK\n`,
		`1\n`,
	},
	`"Drop-in Redis: redis-cli writes through fencegate" block 2`: {
		`worker-11 leads with token {T11}\n`,
		`STALE_TOKEN fencegate: token {T10} is below the current term {T11}\n`,
		`STALE_TOKEN fencegate: token {T10} is below the current term {T11}\n\nOK\nOK\nQUEUED\nQUEUED\nOK\n2\nCOMMAND_NOT_ALLOWED fencegate: FLUSHALL: administrative commands are not allowed\n`,
		`done\n`,
	},
	`"Drop-in PostgreSQL: psql writes through fencegate" block 1`: {
		`CREATE TABLE\nGRANT\n`,
		`worker-6 leads with token {T6}\n`,
		`INSERT 0 1\n`,
	},
	`"Drop-in PostgreSQL: psql writes through fencegate" block 2`: {
		`worker-7 leads with token {T7}\n`,
		`ERROR:  FG001: fencegate: STALE_TOKEN: token {T6} is below the current term {T7}\n`,
		`psql: exit status 1\n`,
	},
	`"Drop-in PostgreSQL: psql writes through fencegate" block 3`: {
		`ERROR:  fencegate: STALE_TOKEN: token {T6} is below the current term {T7}\n`,
		`SET\nBEGIN\nINSERT 0 1\nINSERT 0 1\nCOMMIT\nCOPY 2\n`,
		`(?m)^ id \| amount *\n-+\+-+\n +1 \| +100\n +2 \| +200\n +3 \| +300\n +4 \| +400\n +5 \| +500\n\(5 rows\)\n`,
	},
	`"Drop-in PostgreSQL: psql writes through fencegate" block 4`: {
		`worker-8 leads with token {T8}\n`,
		`worker-9 leads with token {T9}\nINSERT 0 1\n`,
		`psql: exit status 2\nBEGIN\nINSERT 0 1\nFATAL:  fencegate: STALE_TOKEN: token {T8} is below the current term {T9}; its open transaction is rolled back and the connection closed\n`,
		`(?m)^ id \| amount *\n-+\+-+\n +6 \| +600\n\(1 row\)\n`,
	},
}

// TestREADMEWalkthrough runs README.md's walkthrough as a reader would, so
// it cannot rot: it builds fencegate, starts `fencegate dev` on free ports,
// takes the export lines from the banner dev prints, and pastes the
// walkthrough's ```sh blocks, as written in README.md, into one bash -e, in
// order, checking what each prints. Only the psql commands that reach
// fencegate's PostgreSQL listener are changed: from the banner's address
// README.md shows (make run's) to the one dev printed. The parts are said
// to run in any order, so a second run leaves the PostgreSQL part out. It
// also checks that the banner README.md shows is the one dev prints,
// numbers aside.
func TestREADMEWalkthrough(t *testing.T) {
	blocks := readmeWalkthrough(t)
	var sh []readmeBlock
	var banner string
	for _, b := range blocks {
		switch b.lang {
		case "sh":
			sh = append(sh, b)
			if _, ok := walkthroughWants[b.name()]; !ok {
				t.Fatalf("README.md: %s: no expectations in walkthroughWants", b.name())
			}
		case "text":
			banner = b.code
		}
	}
	if len(sh) != len(walkthroughWants) {
		t.Fatalf("README.md: got %d sh blocks in the walkthrough, want %d", len(sh), len(walkthroughWants))
	}
	readmePsql, err := bannerPsql(banner)
	if err != nil {
		t.Fatalf("README.md's banner: %v", err)
	}
	path := walkthroughPath(t)
	bin := buildFencegate(t)

	t.Run("in order", func(t *testing.T) {
		out := runWalkthrough(t, bin, path, readmePsql, sh)
		if got, want := normalizeNumbers(out.banner), normalizeNumbers(banner); !strings.Contains(got, strings.TrimSpace(want)) {
			t.Errorf("README.md shows the banner\n%s\nbut fencegate dev printed\n%s", banner, out.banner)
		}
		// A refusal's log line says what was looked up, and only that.
		for _, tc := range []struct {
			reason string
			want   []string
			absent []string
		}{
			{"STALE_TOKEN", []string{" high_water=", " term="}, nil},
			{"COMMAND_NOT_ALLOWED", nil, []string{" high_water=", " term="}},
		} {
			line := logLine(out.devLog, `msg="write refused"`, "reason="+tc.reason)
			if line == "" {
				t.Errorf("fencegate dev logged no %s refusal:\n%s", tc.reason, out.devLog)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("log line %q: want %q in it", line, w)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(line, a) {
					t.Errorf("log line %q: want no %q in it (never looked up)", line, a)
				}
			}
		}
		// It names the way the write came in: the walkthrough's zombies
		// write over HTTP and through the PostgreSQL and RESP listeners.
		for _, p := range []string{"http", "pgwire", "resp"} {
			if logLine(out.devLog, `msg="write refused"`, "reason=STALE_TOKEN", " protocol="+p+" ") == "" {
				t.Errorf("fencegate dev logged no STALE_TOKEN refusal with protocol=%s:\n%s", p, out.devLog)
			}
		}
	})
	t.Run("without the PostgreSQL part", func(t *testing.T) {
		var some []readmeBlock
		for _, b := range sh {
			if b.section != "PostgreSQL" {
				some = append(some, b)
			}
		}
		runWalkthrough(t, bin, path, readmePsql, some)
	})
}

type walkthroughRun struct{ banner, devLog string }

// logLine returns the first line of log holding every one of subs.
func logLine(log string, subs ...string) string {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			return line
		}
	}
	return ""
}

// psqlArgs matches the banner's psql line: where fencegate's PostgreSQL
// listener is.
var psqlArgs = regexp.MustCompile(`(?m)^  psql .* psql (-h \S+ -p ([0-9]+)) `)

// psqlTarget is where a banner's psql line connects.
type psqlTarget struct {
	args string // "-h HOST -p PORT"
	port string
}

// bannerPsql returns where the banner's psql line connects.
func bannerPsql(banner string) (psqlTarget, error) {
	m := psqlArgs.FindStringSubmatch(banner)
	if m == nil {
		return psqlTarget{}, fmt.Errorf("no psql line with -h and -p in:\n%s", banner)
	}
	return psqlTarget{args: m[1], port: m[2]}, nil
}

// runWalkthrough starts fencegate dev and runs blocks in one bash, their
// psql arguments readmePsql pointed at dev's listener.
func runWalkthrough(t *testing.T, bin, path string, readmePsql psqlTarget, blocks []readmeBlock) walkthroughRun {
	t.Helper()
	dir := t.TempDir()
	banner, stopDev := startDev(t, bin, dir)
	defer stopDev()
	devPsql, err := bannerPsql(banner)
	if err != nil {
		t.Fatalf("fencegate dev's banner: %v", err)
	}

	var exports []string
	for _, line := range strings.Split(banner, "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "export ") {
			exports = append(exports, line)
		}
	}
	if len(exports) != 2 {
		t.Fatalf("got %d export lines in the banner, want 2:\n%s", len(exports), banner)
	}
	var script strings.Builder
	script.WriteString("set -o pipefail\n")
	for _, e := range exports {
		script.WriteString(e + "\n")
	}
	for i, b := range blocks {
		// Whatever listens on make run's port here is not this dev.
		if strings.Count(b.code, readmePsql.port) != strings.Count(b.code, readmePsql.args) {
			t.Fatalf("README.md: %s names port %s other than in psql %s; the test cannot point that at its own fencegate dev:\n%s", b.name(), readmePsql.port, readmePsql.args, b.code)
		}
		code := strings.ReplaceAll(b.code, readmePsql.args, devPsql.args)
		fmt.Fprintf(&script, "echo '@@block %d@@'\n%s\n", i, code)
	}
	script.WriteString("echo '@@end@@'\n")
	scriptPath := filepath.Join(dir, "walkthrough.sh")
	if err := os.WriteFile(scriptPath, []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	outPath := filepath.Join(dir, "walkthrough.out")
	outFile, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", scriptPath)
	cmd.Dir = dir
	cmd.Env = walkthroughEnv(path)
	// A file, not a pipe: the workers left in the background must not keep
	// Wait waiting.
	cmd.Stdout, cmd.Stderr = outFile, outFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	runErr := cmd.Run()
	if cmd.Process != nil {
		// Any etcdctl a failed block left behind.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	raw, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	out := string(raw)
	if runErr != nil {
		t.Fatalf("the walkthrough failed: %v\n--- its output:\n%s\n--- fencegate dev's log:\n%s", runErr, out, readFile(t, filepath.Join(dir, "dev.err")))
	}

	vars := map[string]string{}
	for i, b := range blocks {
		start := strings.Index(out, fmt.Sprintf("@@block %d@@\n", i))
		end := strings.Index(out, fmt.Sprintf("@@block %d@@\n", i+1))
		if i == len(blocks)-1 {
			end = strings.Index(out, "@@end@@\n")
		}
		if start < 0 || end < start {
			t.Fatalf("no output markers for %s in:\n%s", b.name(), out)
		}
		got := out[start+len(fmt.Sprintf("@@block %d@@\n", i)) : end]
		checkOutput(t, b, got, walkthroughWants[b.name()], vars)
	}
	return walkthroughRun{banner: banner, devLog: readFile(t, filepath.Join(dir, "dev.err"))}
}

var placeholder = regexp.MustCompile(`\{([A-Z][A-Z0-9]*)\}`)

// checkOutput matches got against wants in order, binding {NAME}s in vars.
func checkOutput(t *testing.T, b readmeBlock, got string, wants []string, vars map[string]string) {
	t.Helper()
	rest := got
	for _, w := range wants {
		var names []string
		pattern := placeholder.ReplaceAllStringFunc(w, func(m string) string {
			name := m[1 : len(m)-1]
			if v, ok := vars[name]; ok {
				return v
			}
			if !contains(names, name) {
				names = append(names, name)
				return `(?P<` + name + `>\d+)`
			}
			return `\d+`
		})
		re, err := regexp.Compile(`(?s)` + pattern)
		if err != nil {
			t.Fatalf("%s: pattern %q: %v", b.name(), w, err)
		}
		if w == `^$` {
			if got != "" {
				t.Errorf("%s printed %q, want nothing", b.name(), got)
			}
			continue
		}
		m := re.FindStringSubmatchIndex(rest)
		if m == nil {
			t.Errorf("%s: got output\n%s\nwant a match for %q (after what matched before), with %v", b.name(), got, pattern, vars)
			return
		}
		for _, name := range names {
			i := re.SubexpIndex(name)
			vars[name] = rest[m[2*i]:m[2*i+1]]
		}
		rest = rest[m[1]:]
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// readmeWalkthrough returns the fenced code blocks of README.md's
// walkthrough section.
func readmeWalkthrough(t *testing.T) []readmeBlock {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		blocks  []readmeBlock
		in      bool   // inside the walkthrough section
		lang    string // inside a fence when not ""
		code    strings.Builder
		section string
		count   = map[string]int{}
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case lang != "" && line == "```":
			b := readmeBlock{section: section, lang: lang, code: code.String()}
			if lang == "sh" {
				count[section]++
				b.n = count[section]
			}
			blocks = append(blocks, b)
			lang = ""
			code.Reset()
		case lang != "":
			code.WriteString(line + "\n")
		case contains(walkthroughHeadings, line):
			in = true
			section = strings.TrimPrefix(line, "## ")
		case in && strings.HasPrefix(line, "## "):
			in = false
		case in && strings.HasPrefix(line, "### "):
			section = strings.TrimPrefix(line, "### ")
		case in && strings.HasPrefix(line, "```"):
			lang = strings.TrimPrefix(line, "```")
			if lang == "" {
				t.Fatalf("README.md: a code block without a language in the walkthrough")
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatalf("README.md: no code blocks under %q", walkthroughHeadings)
	}
	return blocks
}

// walkthroughPath returns a PATH with the walkthrough's tools on it,
// bin/tools (where make deps builds grpcurl) first.
func walkthroughPath(t *testing.T) string {
	t.Helper()
	tools, err := filepath.Abs(filepath.Join("..", "..", "bin", "tools"))
	if err != nil {
		t.Fatal(err)
	}
	path := tools + string(os.PathListSeparator) + os.Getenv("PATH")
	var missing []string
	for _, tool := range []string{"bash", "etcdctl", "psql", "redis-cli", "curl", "jq", "grpcurl"} {
		if _, err := lookPathIn(tool, path); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("the README walkthrough needs %s: run make deps", strings.Join(missing, ", "))
	}
	return path
}

func lookPathIn(file, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, file)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// walkthroughEnv is the environment of a reader's fresh shell: none of the
// variables the banner sets.
func walkthroughEnv(path string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		// PG*: libpq's variables (PGOPTIONS, PGPORT, ...) would change
		// where and how psql connects.
		case k == "PATH", strings.HasPrefix(k, "ETCDCTL_"), strings.HasPrefix(k, "PG"), k == "FG_HTTP", k == "FG_GRPC", k == "DSN", k == "REDIS_PORT", k == "FG_RESP_PORT":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PATH="+path)
}

// buildFencegate builds cmd/fencegate into a temporary directory.
func buildFencegate(t *testing.T) string {
	t.Helper()
	// go test puts its own GOROOT/bin first on the PATH.
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "fencegate")
	cmd := exec.Command(gobin, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startDev runs bin dev on free ports until stop is called, and returns
// the banner it printed once up.
func startDev(t *testing.T, bin, dir string) (banner string, stop func()) {
	t.Helper()
	outPath, errPath := filepath.Join(dir, "dev.out"), filepath.Join(dir, "dev.err")
	stdout, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(errPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "dev", "--etcd-listen=http://"+freeport.Addr(t), "--grpc-addr="+freeport.Addr(t), "--http-addr="+freeport.Addr(t), "--pg-listen-addr="+freeport.Addr(t), "--redis-listen-addr="+freeport.Addr(t))
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("fencegate dev: got %v at stop, want a clean exit\n%s", err, readFile(t, errPath))
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("fencegate dev did not stop within 30s of SIGINT")
		}
		stdout.Close()
		stderr.Close()
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out := readFile(t, outPath)
		if strings.Contains(out, "Ctrl-C stops everything.") {
			return out, stop
		}
		select {
		case err := <-exited:
			t.Fatalf("fencegate dev exited: %v\n%s", err, readFile(t, errPath))
		default:
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("fencegate dev not up after 2 minutes:\n%s", readFile(t, errPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var digits = regexp.MustCompile(`[0-9]+`)

// normalizeNumbers replaces every number (ports, revisions) with N.
func normalizeNumbers(s string) string { return digits.ReplaceAllString(s, "N") }
