package examples

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/fencegate/fencegate/election/freeport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExamples starts `fencegate dev` (embedded etcd, throwaway
// PostgreSQL) and runs every example against it. Each must see its
// leaders' writes accepted and its zombie's refused, and the table must
// hold the leaders' rows and nothing of the zombie's. fencectl's read
// commands are then checked against the same fencegate.
func TestExamples(t *testing.T) {
	bin := build(t)
	dev := startDev(t, filepath.Join(bin, "fencegate"))
	setup, err := os.ReadFile("setup.sql")
	if err != nil {
		t.Fatal(err)
	}
	conn := dev.connect(t)
	if _, err := conn.Exec(t.Context(), string(setup)); err != nil {
		t.Fatalf("setup.sql: %v", err)
	}

	python := "/usr/bin/python3" // Debian's, which python3-etcd3 is installed for
	if _, err := os.Stat(python); err != nil {
		python = "python3"
	}
	if _, err := os.Stat("node/node_modules/etcd3"); err != nil {
		t.Fatalf("examples/node has no node_modules/etcd3: run make deps (npm ci --prefix examples/node)")
	}
	env := []string{
		"FENCECTL=" + filepath.Join(bin, "fencectl"),
		"FENCECTL_ENDPOINT=" + dev.http, "FENCECTL_ETCD_ENDPOINTS=" + dev.etcd,
		"FENCEGATE_HTTP_ADDR=" + dev.http, "ETCD_ENDPOINT=" + dev.etcd,
		"FG_PG_HOST=" + dev.pgHost, "FG_PG_PORT=" + dev.pgPort,
	}
	for _, tc := range []struct {
		name    string
		cmd     []string
		wantOut []string // in order
		leaders []string
	}{
		{
			name: "shell",
			cmd:  []string{"shell/run.sh"},
			wantOut: []string{
				`"token":"\d+".*HTTP 200`,
				`TERM_ENDED.*HTTP 409`,
				`(?m)^INSERT 0 1$`,
				`STALE_TOKEN.*HTTP 409`,
			},
			leaders: []string{"worker-1", "worker-2"},
		},
		{
			name: "python",
			cmd:  []string{python, "python/worker.py"},
			wantOut: []string{
				`worker-a writes with token \d+: HTTP 200, accepted`,
				`worker-b writes with token \d+: HTTP 200, accepted`,
				`worker-a \(zombie\) writes with token \d+: HTTP 409, refused: STALE_TOKEN`,
			},
			leaders: []string{"worker-a", "worker-b"},
		},
		{
			name: "node",
			cmd:  []string{"node", "node/demo.mjs"},
			wantOut: []string{
				`worker-a writes with token \d+: HTTP 200, accepted`,
				`worker-a frozen \(SIGSTOP\)`,
				`worker-b writes with token \d+: HTTP 200, accepted`,
				`worker-a \(zombie\) writes with token \d+: HTTP 409, refused: STALE_TOKEN`,
			},
			leaders: []string{"worker-a", "worker-b"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, tc.cmd[0], tc.cmd[1:]...)
			cmd.Env = append(os.Environ(), env...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(tc.cmd, " "), err, out)
			}
			rest := string(out)
			for _, w := range tc.wantOut {
				loc := regexp.MustCompile(w).FindStringIndex(rest)
				if loc == nil {
					t.Fatalf("output: got\n%s\nwant a line matching %q (after the ones before it)", out, w)
				}
				rest = rest[loc[1]:]
			}
			if got := workers(t, conn, tc.name); !slices.Equal(got, tc.leaders) {
				t.Errorf("rows of example %s: got workers %q, want %q (the zombie's write must not land)", tc.name, got, tc.leaders)
			}
		})
	}

	t.Run("fencectl", func(t *testing.T) {
		fencectl := func(args ...string) (string, error) {
			cmd := exec.Command(filepath.Join(bin, "fencectl"), args...)
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		out, err := fencectl("fences", "-w", "json")
		if err != nil {
			t.Fatalf("fencectl fences: %v\n%s", err, out)
		}
		type fence struct {
			Name      string `json:"name"`
			HighWater string `json:"highWater"`
		}
		var list struct {
			Fences []fence `json:"fences"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("fencectl fences -w json: %v\n%s", err, out)
		}
		for _, name := range []string{"shell-example", "python-example", "node-example"} {
			var want string
			if err := conn.QueryRow(t.Context(), `SELECT max(token)::text FROM example_writes WHERE example = $1`,
				strings.TrimSuffix(name, "-example")).Scan(&want); err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(list.Fences, func(f fence) bool { return f.Name == name })
			if i < 0 {
				t.Errorf("fencectl fences: no fence %s in\n%s", name, out)
				continue
			}
			if got := list.Fences[i].HighWater; got != want {
				t.Errorf("fence %s: got highWater %s, want %s (the last leader's token)", name, got, want)
			}
			one, err := fencectl("fence", "get", name)
			if err != nil || !regexp.MustCompile(`(?m)^`+name+`\s+`+want+`\s`).MatchString(one) {
				t.Errorf("fencectl fence get %s: got %v\n%s\nwant a row with high-water %s", name, err, one, want)
			}
		}
		if out, err := fencectl("status"); err != nil || !strings.Contains(out, "ready") {
			t.Errorf("fencectl status: got %v\n%s\nwant exit 0 and ready", err, out)
		}
	})
}

// workers lists the workers whose rows example wrote, in order.
func workers(t *testing.T, conn *pgx.Conn, example string) []string {
	t.Helper()
	rows, err := conn.Query(t.Context(), `SELECT worker FROM example_writes WHERE example = $1 ORDER BY id`, example)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// build builds fencegate and fencectl into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	dir := t.TempDir()
	cmd := exec.Command(gobin, "build", "-o", dir+"/", "../cmd/fencegate", "../cmd/fencectl")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// dev is a running `fencegate dev`.
type dev struct {
	http, etcd     string // URLs
	pgHost, pgPort string // the PostgreSQL listener
	dsn            string // the throwaway PostgreSQL's superuser
}

func (d *dev) connect(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), d.dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", d.dsn, err)
	}
	// t.Context() is cancelled by the time cleanups run.
	t.Cleanup(func() { conn.Close(context.WithoutCancel(t.Context())) })
	return conn
}

var dsnLine = regexp.MustCompile(`export DSN='([^']+)'`)

// startDev runs bin dev on free ports until the test ends.
func startDev(t *testing.T, bin string) *dev {
	t.Helper()
	dir := t.TempDir()
	outPath, errPath := filepath.Join(dir, "dev.out"), filepath.Join(dir, "dev.err")
	stdout, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(errPath)
	if err != nil {
		t.Fatal(err)
	}
	d := &dev{http: "http://" + freeport.Addr(t), etcd: "http://" + freeport.Addr(t)}
	pg := freeport.Addr(t)
	d.pgHost, d.pgPort, _ = net.SplitHostPort(pg)
	cmd := exec.Command(bin, "dev", "--etcd-listen="+d.etcd, "--grpc-addr="+freeport.Addr(t),
		"--http-addr="+strings.TrimPrefix(d.http, "http://"), "--pg-listen-addr="+pg,
		"--redis-listen-addr="+freeport.Addr(t))
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
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
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out := readFile(t, outPath)
		if strings.Contains(out, "Ctrl-C stops everything.") {
			m := dsnLine.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("fencegate dev's banner names no DSN:\n%s", out)
			}
			d.dsn = m[1]
			return d
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup, which waits for it
			t.Fatalf("fencegate dev exited: %v\n%s", err, readFile(t, errPath))
		default:
		}
		if time.Now().After(deadline) {
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
