package deploy_test

import (
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// repoRoot is the repository's root, the container build's context.
const repoRoot = ".."

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case
	args string
	line int
}

// stage is one FROM ... of a Dockerfile.
type stage struct {
	from, name string
	ins        []instruction
}

func parseDockerfile(file string) ([]stage, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var stages []stage
	cont, start := "", 0
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if cont == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cont == "" {
			start = n + 1
		}
		if strings.HasSuffix(line, "\\") {
			cont += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line, cont = cont+line, ""
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			st := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			return nil, fmt.Errorf("%s:%d: %s before the first FROM", file, start, in.cmd)
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	return stages, nil
}

const dockerfile = "container/Dockerfile"

// The build arguments the test builds with, as `make image` passes them.
const (
	testVersion = "v0.0.0-deploy-test"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
)

var built struct {
	once sync.Once
	bin  string
	dir  string
	err  error
}

// fencegateBinary is fencegate built by the Dockerfile's build stage, run
// here: its COPY, RUN, ARG and WORKDIR into a temporary root, honouring
// .dockerignore; then the path the final stage copies the binary from.
// Built once per test binary; TestMain removes it.
func fencegateBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() { built.bin, built.err = runBuildStage() })
	if built.err != nil {
		t.Fatalf("the Dockerfile's build stage: %v", built.err)
	}
	return built.bin
}

func runBuildStage() (string, error) {
	st, err := readDockerfile()
	if err != nil {
		return "", err
	}
	root, err := os.MkdirTemp("", "fencegate-deploy-build-")
	if err != nil {
		return "", err
	}
	built.dir = root
	ignore, err := dockerignore(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		return "", err
	}
	workdir := "/"
	args := map[string]string{"VERSION": testVersion, "COMMIT": testCommit}
	env := os.Environ()
	for _, in := range st.build.ins {
		switch in.cmd {
		case "WORKDIR":
			workdir = path.Join(workdir, in.args)
			if err := os.MkdirAll(filepath.Join(root, workdir), 0o755); err != nil {
				return "", err
			}
		case "ARG":
			name, def, _ := strings.Cut(in.args, "=")
			if _, given := args[name]; !given {
				args[name] = def
			}
			env = append(env, name+"="+args[name])
		case "COPY":
			f := strings.Fields(in.args)
			dst := f[len(f)-1]
			if !path.IsAbs(dst) {
				dst = path.Join(workdir, dst)
			}
			for _, src := range f[:len(f)-1] {
				if err := copyContext(filepath.Join(repoRoot, src), src, filepath.Join(root, dst), ignore); err != nil {
					return "", fmt.Errorf("line %d: COPY %s: %w", in.line, in.args, err)
				}
			}
		case "RUN":
			cmd := exec.Command("sh", "-c", in.args)
			cmd.Dir = filepath.Join(root, workdir)
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				return "", fmt.Errorf("line %d: RUN %s: %w\n%s", in.line, in.args, err, out)
			}
		case "ENV", "LABEL":
		default:
			return "", fmt.Errorf("line %d: %s in the build stage: the test does not know how to run it", in.line, in.cmd)
		}
	}
	return filepath.Join(root, st.binaryFrom), nil
}

type parsedDockerfile struct {
	build, final stage
	binaryFrom   string // the path the final stage copies from the build stage
	binaryTo     string
}

func readDockerfile() (parsedDockerfile, error) {
	var p parsedDockerfile
	stages, err := parseDockerfile(dockerfile)
	if err != nil {
		return p, err
	}
	if len(stages) != 2 || stages[0].name == "" {
		return p, fmt.Errorf("%s: got %d stages, want two: a named build stage, then the image", dockerfile, len(stages))
	}
	p.build, p.final = stages[0], stages[1]
	for _, in := range p.final.ins {
		if f := strings.Fields(in.args); in.cmd == "COPY" && len(f) == 3 && f[0] == "--from="+p.build.name {
			p.binaryFrom, p.binaryTo = f[1], f[2]
		}
	}
	if p.binaryFrom == "" {
		return p, fmt.Errorf("%s: the final stage copies nothing from stage %q", dockerfile, p.build.name)
	}
	return p, nil
}

// dockerignore reads the patterns of a .dockerignore (no ! exceptions).
func dockerignore(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var pats []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") {
			return nil, fmt.Errorf(".dockerignore: exception %q: the test does not handle those", l)
		}
		pats = append(pats, strings.Trim(l, "/"))
	}
	return pats, nil
}

func ignored(rel string, pats []string) bool {
	for _, p := range pats {
		for r := rel; r != "." && r != "/"; r = path.Dir(r) {
			if ok, _ := path.Match(p, r); ok {
				return true
			}
		}
	}
	return false
}

// copyContext copies src (ctxRel within the context) to dst as COPY
// does: a directory's contents into dst, a file to dst (or into it, when
// dst ends in /).
func copyContext(src, ctxRel, dst string, ignore []string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		if strings.HasSuffix(dst, "/") || isDir(dst) {
			dst = filepath.Join(dst, filepath.Base(src))
		}
		return copyFile(src, dst, fi.Mode())
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if ignored(path.Join(ctxRel, filepath.ToSlash(rel)), ignore) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		return copyFile(p, target, info.Mode())
	})
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func copyFile(src, dst string, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode.Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

var xFlags = regexp.MustCompile(`-X main\.\w+=\S*`)

// makeLdflags is the -X flags a dry run of a make target would pass.
func makeLdflags(t *testing.T, target string) []string {
	t.Helper()
	cmd := exec.Command("make", "-n", "-C", repoRoot, target, "VERSION="+testVersion, "COMMIT="+testCommit)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n %s: %v\n%s", target, err, out)
	}
	var flags []string
	for _, f := range xFlags.FindAllString(string(out), -1) {
		flags = append(flags, strings.TrimRight(f, "'\""))
	}
	return flags
}

// TestContainerImage runs the Dockerfile's build stage and checks its
// binary: static, stamped as `make build` stamps, and what the final
// stage runs, as a numeric non-root user on a distroless or scratch base.
func TestContainerImage(t *testing.T) {
	p, err := readDockerfile()
	if err != nil {
		t.Fatal(err)
	}
	bin := fencegateBinary(t)

	// The same -X flags as make build, from the same LDFLAGS.
	want, got := makeLdflags(t, "build"), makeLdflags(t, "build-static")
	if len(want) != 2 || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("make build-static's -ldflags -X: got %q, want make build's %q", got, want)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	if got, want := strings.TrimSpace(string(out)), fmt.Sprintf("fencegate %s (commit %s, %s)", testVersion, testCommit, runtime.Version()); got != want {
		t.Errorf("version: got %q, want %q", got, want)
	}

	// Static: no interpreter, no shared library (distroless/static has no
	// C library).
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("the binary has a dynamic loader (PT_INTERP); want it linked statically")
		}
	}
	if libs, err := ef.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary's shared libraries: got %v, %v, want none", libs, err)
	}

	// The build stage's Go is go.mod's.
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if goLine == nil || !strings.HasPrefix(p.build.from, "golang:"+string(goLine[1])+"-") {
		t.Errorf("build stage FROM %s: want golang:%s-..., go.mod's Go", p.build.from, goLine[1])
	}

	// The image.
	if !strings.HasPrefix(p.final.from, "gcr.io/distroless/static") && p.final.from != "scratch" {
		t.Errorf("final stage FROM %s: want distroless/static or scratch", p.final.from)
	}
	last := map[string]string{}
	for _, in := range p.final.ins {
		last[in.cmd] = in.args
	}
	user, _, _ := strings.Cut(last["USER"], ":")
	if uid, err := strconv.Atoi(user); err != nil || uid == 0 {
		t.Errorf("USER %q: want a numeric user other than 0, which runAsNonRoot can check", last["USER"])
	}
	if got, want := last["ENTRYPOINT"], fmt.Sprintf("[%q]", p.binaryTo); got != want {
		t.Errorf("ENTRYPOINT: got %s, want %s, the binary copied from the build stage", got, want)
	}
}
