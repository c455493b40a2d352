package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencegate/fencegate/election"
)

const runSummary = `Campaign in election NAME (under --election-prefix, with etcd's
concurrency.Election layout, so it competes with candidates using any etcd
client), and once leader run CMD with these in its environment:

  FENCEGATE_FENCE      the fence (--fence, default the election's name)
  FENCEGATE_TOKEN      the fencing token: the create revision of our key
  FENCEGATE_ELECTION   the election's name
  FENCEGATE_HTTP_ADDR  fencegate's HTTP address (--endpoint)
  PGOPTIONS            '-c fencegate.fence=F -c fencegate.token=T' after any
                       PGOPTIONS already set, for fencegate's PostgreSQL listener

FENCECTL_TOKEN and FENCECTL_ETCD_PASSWORD are not passed on. CMD runs in a
process group of its own (so it cannot read the terminal); SIGINT, SIGTERM,
SIGQUIT, SIGABRT and SIGHUP sent to fencectl once leader are forwarded to
that group, and so are SIGTSTP (Ctrl-Z) and SIGCONT: CMD stops, fencectl
does not, and keeps the leadership (kill -CONT <fencectl's pid> resumes
CMD). A signal ignored when fencectl starts (SIGHUP under nohup) stays
ignored, by fencectl and CMD.

When the leadership ends (the key is deleted, etcd says the lease is gone,
or no keep-alive has proven the lease alive for long enough that it might
expire soon), CMD's process group, and every process below fencectl that
left it, gets SIGTERM, then SIGKILL after --grace,
and at the latest --kill-margin before the lease can have expired: that
deadline is counted on fencectl's own clock from the send time of the last
keep-alive etcd answered, plus the TTL, so a fencectl cut off from etcd kills
CMD in time without hearing from etcd. When a lost leadership leaves less
time than --grace, CMD gets less. A fencectl frozen itself (SIGSTOP, a paused
VM) cannot kill anything while frozen: the fencing token, checked by
fencegate, is what makes such a late writer harmless.

When CMD exits, whatever it left is killed (in its process group or not:
fencectl is a subreaper, so what a process below it leaves when it exits
comes to fencectl, which reaps it when it exits; each is stopped first, until no new one appears, so a
daemon that forks itself over and over is caught), the leadership is resigned (key deleted, lease
revoked), and fencectl exits with CMD's status (128+n when a signal n ended
it). If fencectl dies, the kernel sends CMD SIGKILL; what CMD started
outlives it, holding the token, until fencegate refuses the token.

Exit status: CMD's (at least 1 when the leadership ended first); 2 for a
mistake on the command line; 1 when fencectl fails before CMD starts; 126
or 127 when CMD cannot be run; 128+n when signal n interrupts the campaign.`

// maxFenceName is the longest fence name fencegate takes
// (proxy.Config.MaxFenceName's default).
const maxFenceName = 128

// runConfig is what `fencectl run` is configured with.
type runConfig struct {
	Election   string
	Fence      string
	Value      string
	TTL        time.Duration
	Grace      time.Duration
	KillMargin time.Duration
}

// validate checks the flags and returns the election's SafetyMargin: how
// long before the lease could expire the leadership is given up when etcd
// is silent. It leaves room for --grace and --kill-margin when it can.
func (rc *runConfig) validate() (time.Duration, error) {
	if err := election.ValidateName(rc.Election); err != nil {
		if rc.Election == "" {
			return 0, errors.New("run: --election is required")
		}
		return 0, fmt.Errorf("run: --election %q: want a name without '/'", rc.Election)
	}
	if rc.Fence == "" {
		rc.Fence = rc.Election
	}
	if !election.ValidFenceName(rc.Fence, maxFenceName) {
		return 0, fmt.Errorf("run: fence %q (--fence, default the election's name): want letters, digits, '.', '_' and '-', starting with a letter or digit, as fencegate takes", rc.Fence)
	}
	if rc.TTL < time.Second || rc.TTL%time.Second != 0 {
		return 0, fmt.Errorf("run: --ttl %v: want a whole number of seconds, at least 1s", rc.TTL)
	}
	if rc.Grace < 0 {
		return 0, fmt.Errorf("run: --grace %v is negative", rc.Grace)
	}
	if rc.KillMargin == 0 {
		rc.KillMargin = min(time.Second, rc.TTL/4)
	}
	if rc.KillMargin < 0 || rc.KillMargin > rc.TTL/2 {
		return 0, fmt.Errorf("run: --kill-margin %v: want more than 0 and at most half of --ttl %v", rc.KillMargin, rc.TTL)
	}
	margin := max(rc.Grace+rc.KillMargin, rc.TTL/3)
	return min(margin, rc.TTL/2), nil
}

// killDeadline is when CMD gets SIGKILL after the leadership ended at
// noticed: --grace after it, but no later than margin before the lease
// can have expired (provenUntil, the last answered keep-alive's send time
// plus the TTL). Counting only from noticed would let a child outlive the
// lease whenever the loss is noticed late.
func killDeadline(noticed, provenUntil time.Time, grace, margin time.Duration) time.Time {
	at := noticed.Add(grace)
	if latest := provenUntil.Add(-margin); latest.Before(at) {
		at = latest
	}
	return at
}

func runRun(ctx context.Context, g *globalConfig, args []string, stdout, stderr io.Writer) error {
	rc := runConfig{TTL: 10 * time.Second, Grace: 2 * time.Second}
	c := newCommand(g, "run", "--election NAME [--ttl 10s] [--grace 2s] -- CMD [ARGS...]", runSummary)
	c.interspersed = false
	c.fs.StringVar(&rc.Election, "election", rc.Election, "the election to campaign in (required)")
	c.fs.StringVar(&rc.Fence, "fence", rc.Fence, "the fence CMD writes, in FENCEGATE_FENCE and PGOPTIONS (default the election's name)")
	c.fs.StringVar(&rc.Value, "value", rc.Value, "the value of our candidate key: fencegate reports it as the fence's leader (default <hostname>/<pid>)")
	c.fs.DurationVar(&rc.TTL, "ttl", rc.TTL, "the lease's time to live, whole seconds: how long etcd keeps our leadership without keep-alives")
	c.fs.DurationVar(&rc.Grace, "grace", rc.Grace, "time between SIGTERM and SIGKILL when the leadership ends (less when the lease is about to expire)")
	c.fs.DurationVar(&rc.KillMargin, "kill-margin", rc.KillMargin, "SIGKILL goes out at least this long before the lease can have expired: room for the kill itself and for clocks that run at different rates (default min(1s, TTL/4))")
	rest, err := c.parse(args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return c.usageError(stderr, "no command to run; want 'fencectl run --election NAME -- CMD [ARGS...]'")
	}
	if rc.Value == "" {
		host, _ := os.Hostname()
		rc.Value = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	margin, err := rc.validate()
	if err != nil {
		return c.usageError(stderr, "%s", strings.TrimPrefix(err.Error(), "run: "))
	}
	graceSet := false
	c.fs.Visit(func(f *flag.Flag) { graceSet = graceSet || f.Name == "grace" })
	if graceSet && rc.Grace+rc.KillMargin > margin {
		fmt.Fprintf(stderr, "fencectl: warning: when the lease is in doubt, CMD gets %v between SIGTERM and SIGKILL, not --grace %v: raise --ttl for more\n",
			margin-rc.KillMargin, rc.Grace)
	}

	// Our own channel, besides main's context: the signal is forwarded to
	// CMD and decides the exit status of an interrupted campaign. SIGQUIT
	// (Ctrl-\) and SIGABRT (systemd's watchdog) too: their default action
	// would end fencectl on the spot, CMD's tree left running with the
	// token.
	sigs := make(chan os.Signal, 4)
	notify(sigs, stopSignals...)
	defer signal.Stop(sigs)

	cli, err := dialEtcd(ctx, g)
	if err != nil {
		return interrupted(sigs, err)
	}
	defer cli.Close()
	// Campaigning returns at once when no one leads; otherwise say what
	// fencectl waits for.
	said := make(chan struct{})
	waiting := time.AfterFunc(time.Second, func() {
		defer close(said)
		fmt.Fprintf(stderr, "fencectl: run: waiting for leadership of election %q: another candidate leads it\n", rc.Election)
	})
	lead, err := election.Campaign(ctx, cli, election.CampaignConfig{
		Prefix:       g.ElectionPrefix,
		Election:     rc.Election,
		Value:        rc.Value,
		TTL:          rc.TTL,
		SafetyMargin: margin,
	})
	if !waiting.Stop() {
		<-said // stderr is written by this goroutine only from here on
	}
	if err != nil {
		return interrupted(sigs, fmt.Errorf("run: %w", err))
	}
	// SIGHUP too, from now on: it is for CMD (before, its default action
	// ends the campaign). So are SIGTSTP and SIGCONT: CMD runs in a
	// process group of its own, which job control does not reach, and a
	// fencectl stopped by SIGTSTP's default action would neither renew the
	// lease nor stop CMD once it ended. fencectl stops CMD instead, and
	// goes on.
	notify(sigs, syscall.SIGHUP, syscall.SIGTSTP, syscall.SIGCONT)
	// SIGPIPE is caught, not left to its default action: a write to a
	// stderr whose reader is gone (a dead `| tee`) would end fencectl on
	// the spot, before it stopped CMD's tree. Caught, not ignored: an
	// ignored signal stays ignored in CMD.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	resign := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.CommandTimeout)
		defer cancel()
		if err := lead.Resign(rctx); err != nil {
			fmt.Fprintf(stderr, "fencectl: %v; the lease expires within %v\n", err, rc.TTL)
		}
	}

	if err := lead.Err(); err != nil {
		resign()
		return fmt.Errorf("run: leadership of %q ended before %s could start: %w", rc.Election, rest[0], err)
	}
	// A subreaper: what CMD starts and then leaves (a daemon forking
	// twice, setsid) becomes fencectl's child when its parent exits, not
	// init's, so killTree finds it.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	cmd := exec.Command(rest[0], rest[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = childEnv(os.Environ(), rc.Fence, rc.Election, lead.Token(), g.Endpoint)
	// Pdeathsig: CMD must not outlive a fencectl that was killed. It is
	// tied to the thread that forks, and the Go runtime ends threads only
	// when a goroutine locked to one exits, which none here does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// fencectl reaps the orphans it adopts (reapOrphans), not only CMD.
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	if err := cmd.Start(); err != nil {
		resign()
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		// os/exec's "fork/exec PATH: ..." names a call, not the problem.
		why := err
		var pe *os.PathError
		if errors.As(err, &pe) {
			why = pe.Err
		}
		var ee *exec.Error
		if errors.As(err, &ee) {
			why = ee.Err
		}
		return &exitError{code: code, msg: fmt.Sprintf("run: cannot run %s: %v", rest[0], why)}
	}
	pgid := cmd.Process.Pid
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()
	// A fencectl in the background of a terminal with tostop, writing why
	// it stops CMD, would be stopped itself by SIGTTOU (SIGTTIN: a read)
	// before the SIGKILL it owes. Ignored from here, after CMD started:
	// CMD does not inherit it.
	signal.Ignore(syscall.SIGTTOU, syscall.SIGTTIN)

	var (
		lost     = lead.Done()
		lostMsg  string
		killT    *time.Timer
		killC    <-chan time.Time
		waitErr  error
		finished bool
	)
	for !finished {
		select {
		case waitErr = <-waitc:
			finished = true
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-chld:
			reapOrphans(pgid)
		case <-lost:
			lost = nil
			now := time.Now()
			at := killDeadline(now, lead.ProvenUntil(), rc.Grace, rc.KillMargin)
			lostMsg = fmt.Sprintf("run: leadership of %q (token %d) ended: %v", rc.Election, lead.Token(), lead.Err())
			// Signals first, words after: writing to stderr may fail
			// or block.
			if !at.After(now) {
				killAll(pgid, true)
				fmt.Fprintf(stderr, "fencectl: %s; SIGKILL to %s\n", lostMsg, rest[0])
				continue
			}
			killTree(pgid, syscall.SIGTERM)
			killTree(pgid, syscall.SIGCONT) // a stopped CMD must run to end
			killT = time.NewTimer(at.Sub(now))
			killC = killT.C
			fmt.Fprintf(stderr, "fencectl: %s; SIGTERM to %s, SIGKILL in %v\n", lostMsg, rest[0], at.Sub(now).Round(time.Millisecond))
		case <-killC:
			killC = nil
			killAll(pgid, true)
		}
	}
	if killT != nil {
		killT.Stop()
	}
	// What CMD left behind, in its group or not, holds the token too.
	if n := killAll(pgid, false); n > 0 {
		fmt.Fprintf(stderr, "fencectl: run: killed %d %s that %s left behind\n", n, map[bool]string{true: "process", false: "processes"}[n == 1], rest[0])
	}
	resign()

	code := exitCode(cmd.ProcessState, waitErr)
	if lostMsg != "" {
		msg := fmt.Sprintf("%s; %s exited with status %d", lostMsg, rest[0], code)
		// A child that stopped cleanly on SIGTERM still did not finish.
		return &exitError{code: max(code, 1), msg: msg}
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// killTree sends sig to CMD's process group and to every live process
// below fencectl: those that left the group (setsid) and, fencectl being a
// subreaper, those whose parents exited.
func killTree(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
	for _, p := range descendants(os.Getpid()) {
		_ = syscall.Kill(p.pid, sig)
	}
}

// How many scans in a row must find nothing new before killAll kills what
// it stopped: killQuiet once it has found something (a daemon that forks
// itself over and over lives a moment per process, and one scan may miss
// them all), killIdle while it has found nothing (CMD left nothing behind:
// its leadership is resigned without delay). killScans bounds the scans.
const (
	killQuiet = 20
	killIdle  = 3
	killScans = 2000
)

// killAll kills CMD's process group and every live process below
// fencectl, and returns how many of the latter it killed. A scan and a kill
// would miss what forks in between: a daemon that forks itself and exits,
// over and over, escapes every round. So killAll first stops them (a
// stopped process cannot fork), again and again until scans in a row find
// no process it has not stopped, and then kills what is still below
// fencectl: a process id is signalled only while it is fencectl's
// descendant, never one freed and reused meanwhile.
//
// Processes are stopped one by one and by process group, as signalling a
// group reaches all its members at once, those forked meanwhile included:
// one process of a respawning daemon seen is then enough. A group is
// signalled only when all its members are known to be fencectl's: it is
// CMD's, or its process has left fencectl's session (a session is joined
// only by birth, so the whole of one a descendant made is below
// fencectl), or its leader is a live descendant; and only while a
// descendant is in it. cmdAlive: CMD is not yet reaped, so its group
// exists.
func killAll(pgid int, cmdAlive bool) int {
	if cmdAlive {
		_ = syscall.Kill(-pgid, syscall.SIGSTOP)
	}
	self := os.Getpid()
	sid, _ := unix.Getsid(0)
	stopped := map[int]bool{}
	groups := map[int]bool{}
	for quiet, scans := 0, 0; scans < killScans; scans++ {
		if quiet >= killIdle && (len(stopped) == 0 || quiet >= killQuiet) {
			break
		}
		quiet++
		procs := descendants(self)
		live := make(map[int]bool, len(procs))
		for _, p := range procs {
			live[p.pid] = true
		}
		for _, p := range procs {
			if !stopped[p.pid] {
				stopped[p.pid], quiet = true, 0
				_ = syscall.Kill(p.pid, syscall.SIGSTOP)
			}
			if !groups[p.pgid] && p.pgid > 0 && (p.pgid == pgid || p.sid != sid || live[p.pgid]) {
				groups[p.pgid], quiet = true, 0
				_ = syscall.Kill(-p.pgid, syscall.SIGSTOP)
			}
		}
	}
	if cmdAlive {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	left := descendants(self)
	for _, p := range left {
		if groups[p.pgid] {
			_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
			delete(groups, p.pgid)
		}
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
	return len(left)
}

// descendant is a live process below fencectl.
type descendant struct{ pid, pgid, sid int }

// threadsLeft reports whether process pid, whose state reads Z, still
// runs threads: a process whose main thread ended (pthread_exit from
// main) reads Z while its other threads run on, and so do its children.
func threadsLeft(pid int) bool {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			return err == nil && n > 1
		}
	}
	return false
}

// descendants returns the live processes below root (children, theirs,
// ...), read from /proc; zombies are left out, not processes whose main
// thread alone has ended.
func descendants(root int) []descendant {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	pids := make([]int, 0, len(entries))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	// The newest first: a process that forks itself and exits lives
	// for a moment, and the later its stat is read the likelier it is
	// gone, its successor not in the list.
	slices.SortFunc(pids, func(a, b int) int { return cmp.Compare(b, a) })
	children := map[int][]descendant{}
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...: comm may hold spaces
		// and parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 4 || f[0] == "X" || f[0] == "Z" && !threadsLeft(pid) {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		pgid, err2 := strconv.Atoi(f[2])
		sid, err3 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		children[ppid] = append(children[ppid], descendant{pid: pid, pgid: pgid, sid: sid})
	}
	var out []descendant
	for queue := children[root]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0].pid]...)
	}
	return out
}

// stopSignals end fencectl (main's context) and, forwarded, CMD.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGABRT}

// notify is signal.Notify of those of sigs that were not ignored when
// fencectl started: SIGHUP under nohup, SIGINT in a shell script's
// background job. Those stay ignored in fencectl and in CMD, which
// inherits them (Notify would undo that, and a hangup would end the
// leadership nohup was to keep).
func notify(c chan<- os.Signal, sigs ...os.Signal) {
	var caught []os.Signal
	for _, sig := range sigs {
		if !signal.Ignored(sig) {
			caught = append(caught, sig)
		}
	}
	if len(caught) > 0 { // none would mean all
		signal.Notify(c, caught...)
	}
}

// reapOrphans reaps fencectl's children that have exited, CMD (cmdPid,
// which cmd.Wait reaps) aside: fencectl is a subreaper, and what CMD's
// tree leaves becomes its child. Unreaped, each would hold a process id
// (and a slot of the pids cgroup) for as long as CMD runs.
func reapOrphans(cmdPid int) {
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == cmdPid {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 2 || string(f[0]) != "Z" || string(f[1]) != strconv.Itoa(self) {
			continue
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}

// interrupted turns err into 128+n when signal n interrupted what failed.
func interrupted(sigs <-chan os.Signal, err error) error {
	select {
	case s := <-sigs:
		return &exitError{code: 128 + int(s.(syscall.Signal)), msg: "run: interrupted (" + unix.SignalName(s.(syscall.Signal)) + ")"}
	default:
		return err
	}
}

// exitCode is a shell's $? for a finished process: its status, or 128+n
// for a death by signal n.
func exitCode(ps *os.ProcessState, waitErr error) int {
	if ps == nil {
		if waitErr != nil {
			return 1
		}
		return 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// childEnv is env with fencectl's secrets removed and the leadership's
// variables set.
func childEnv(env []string, fence, electionName string, token int64, endpoint string) []string {
	out := make([]string, 0, len(env)+5)
	pgOptions := ""
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "FENCECTL_TOKEN", "FENCECTL_ETCD_PASSWORD",
			"FENCEGATE_FENCE", "FENCEGATE_TOKEN", "FENCEGATE_ELECTION", "FENCEGATE_HTTP_ADDR":
			continue
		case "PGOPTIONS":
			pgOptions = v + " "
			continue
		}
		out = append(out, kv)
	}
	t := strconv.FormatInt(token, 10)
	return append(out,
		"FENCEGATE_FENCE="+fence,
		"FENCEGATE_TOKEN="+t,
		"FENCEGATE_ELECTION="+electionName,
		"FENCEGATE_HTTP_ADDR="+endpoint,
		"PGOPTIONS="+pgOptions+"-c fencegate.fence="+pgEscape(fence)+" -c fencegate.token="+t,
	)
}

// pgEscape escapes a value for libpq's options string, where spaces
// separate arguments and a backslash escapes the next character.
func pgEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, " ", `\ `).Replace(s)
}
