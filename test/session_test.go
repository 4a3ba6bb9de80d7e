package test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startSession starts a session in ws and registers its teardown.
func startSession(t *testing.T, ws string, args ...string) string {
	t.Helper()
	return startSessionWith(t, opts{dir: ws}, args...)
}

// startSessionWith starts a session with o (its environment too) and stops
// it at the test's end.
func startSessionWith(t *testing.T, o opts, args ...string) string {
	t.Helper()
	name := fmt.Sprintf("t%d", time.Now().UnixNano()%1e9)
	r := hutch(t, o, append([]string{"session", "start", "--name", name}, args...)...)
	mustCode(t, r, 0)
	if strings.TrimSpace(r.stdout) != name {
		t.Fatalf("session start printed %q, want %q", r.stdout, name)
	}
	t.Cleanup(func() { hutch(t, o, "session", "stop", name) })
	return name
}

func sessionPid(t *testing.T, ws, name string) int {
	t.Helper()
	r := hutch(t, opts{dir: ws}, "session", "ls")
	for _, l := range strings.Split(r.stdout, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == name {
			pid, _ := strconv.Atoi(f[1])
			return pid
		}
	}
	t.Fatalf("session %s not listed:\n%s", name, r.stdout)
	return 0
}

// initsOf lists the pids of inits whose parent is pid.
func initsOf(pid int) []int {
	var out []int
	for _, p := range processesWith("hutch:init") {
		if f := statFields(p); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

func TestSessionLifecycle(t *testing.T) {
	ws := userDir(t)
	name := startSession(t, ws)
	pid := sessionPid(t, ws, name)
	if len(initsOf(pid)) != 1 {
		t.Fatalf("session supervisor %d has no init", pid)
	}
	// State persists between execs: it is one sandbox.
	r := hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", "echo kept > /tmp/state; echo $HOME")
	mustCode(t, r, 0)
	for i := 0; i < 10; i++ {
		r = hutch(t, opts{dir: ws}, "exec", name, "--", "cat", "/tmp/state")
		mustCode(t, r, 0)
		if r.stdout != "kept\n" {
			t.Fatalf("exec %d: %q", i, r.stdout)
		}
	}
	// Concurrent execs.
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", fmt.Sprintf("sleep 0.2; echo c%d; exit %d", i, i))
			if r.code != i || r.stdout != fmt.Sprintf("c%d\n", i) {
				errs <- fmt.Sprintf("concurrent exec %d: code %d out %q err %q", i, r.code, r.stdout, r.stderr)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// Stop: every process gone, the socket gone.
	r = hutch(t, opts{dir: ws}, "session", "stop", name)
	mustCode(t, r, 0)
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("session supervisor %d still alive after stop", pid)
	}
	if n := initsOf(pid); len(n) != 0 {
		t.Errorf("session init still alive: %v", n)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "hutch", name+".sock")); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	r = hutch(t, opts{dir: ws}, "exec", name, "--", "true")
	mustCode(t, r, 125)
	if !strings.Contains(r.stderr, fmt.Sprintf("no session named %q is running", name)) {
		t.Errorf("exec into a stopped session: %s", r.stderr)
	}
}

// Every exec gets the same hardening as hutch run.
func TestSessionExecHardening(t *testing.T) {
	ws := userDir(t)
	probeIn(t, ws)
	name := startSession(t, ws)
	// A session's first command makes its own nested user namespace and
	// applies every restriction itself; the second starts the session's
	// spawner, which applies the shared ones once, and it and every later
	// command start from it (sharing one nested user namespace and one
	// seccomp listener): check all three kinds.
	var r result
	for i := 1; i <= 3; i++ {
		r = hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c",
			`id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; cat /proc/self/uid_map /proc/self/setgroups; ./probe keyctl direct:80; touch /usr/x 2>&1; curl -sS https://evil.example/ 2>&1 | head -1`)
		mustCode(t, r, 0)
		for _, want := range []string{"1000\n", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "1000          0          1", "deny", "keyctl EPERM", "direct:80 EACCES", "Read-only file system", "response 403"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("exec %d lacks %q:\n%s", i, want, r.stdout)
			}
		}
		for _, want := range []string{"hutch: blocked by seccomp policy: keyctl (1 time)", "direct connection to 203.0.113.1:80", "destination evil.example:443 not allowlisted (1 attempt)"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("exec %d stderr lacks %q:\n%s", i, want, r.stderr)
			}
		}
	}
	// The next exec's summary does not repeat the previous exec's blocks.
	r = hutch(t, opts{dir: ws}, "exec", name, "--", "true")
	mustCode(t, r, 0)
	if r.stderr != "" {
		t.Errorf("clean exec printed: %q", r.stderr)
	}
}

// An exec's timeout kills it and everything it started; the session lives.
func TestSessionExecTimeout(t *testing.T) {
	ws := userDir(t)
	name := startSession(t, ws)
	m := uniqueMarker(t)
	r := hutch(t, opts{dir: ws}, "exec", "--timeout", "1s", name, "--", "/bin/sh", "-c", "setsid sleep 1000 & sleep 1000; : "+m)
	mustCode(t, r, 124)
	if !strings.Contains(r.stderr, "hutch: timed out after 1s") {
		t.Errorf("stderr: %s", r.stderr)
	}
	waitGone(t, m, 3*time.Second)
	r = hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", "ps -eo args | grep -c '[s]leep 1000'")
	if strings.TrimSpace(r.stdout) != "0" {
		t.Errorf("leftover sleeps in the session: %q", r.stdout)
	}
	// Leftovers of a normal exit are killed too.
	r = hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", "(setsid sleep 999 &) ; echo started")
	mustCode(t, r, 0)
	r = hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", "ps -eo args | grep -c '[s]leep 999'")
	if strings.TrimSpace(r.stdout) != "0" {
		t.Errorf("a finished exec left processes behind: %q", r.stdout)
	}
}

func TestSessionIdleExpiry(t *testing.T) {
	ws := userDir(t)
	pol := filepath.Join(userDir(t), "p.toml")
	writeUserFile(t, pol, "version = 1\n[lifecycle]\nsession_idle = \"2s\"\nsession_max = \"1h\"\n")
	name := startSession(t, ws, "--policy", pol)
	pid := sessionPid(t, ws, name)
	deadline := time.Now().Add(15 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("idle session did not end")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := initsOf(pid); len(n) != 0 {
		t.Errorf("init of the expired session alive: %v", n)
	}
}

// SIGKILL of the session's supervisor takes its sandbox down.
func TestSessionSupervisorKilled(t *testing.T) {
	ws := userDir(t)
	name := startSession(t, ws)
	pid := sessionPid(t, ws, name)
	inits := initsOf(pid)
	if len(inits) != 1 {
		t.Fatalf("inits of %d: %v", pid, inits)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(inits[0], 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the init survived its supervisor")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := hutch(t, opts{dir: ws}, "session", "ls")
	if strings.Contains(r.stdout, name) {
		t.Errorf("dead session still listed:\n%s", r.stdout)
	}
}

// --fresh runs the command in a new sandbox with the session's policy.
func TestSessionFresh(t *testing.T) {
	ws := userDir(t)
	name := startSession(t, ws, "--timeout", "7s")
	hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", "echo x > /tmp/in-session")
	r := hutch(t, opts{dir: ws}, "exec", "--fresh", name, "--", "/bin/sh", "-c", "ls /tmp/in-session 2>&1; sleep 30")
	mustCode(t, r, 124)
	if !strings.Contains(r.stdout, "No such file") || !strings.Contains(r.stderr, "timed out after 7s") {
		t.Errorf("--fresh: stdout %q stderr %q", r.stdout, r.stderr)
	}
}

// `hutch exec` has two clients: the C fast path (a constructor that runs
// before the Go runtime, for the plain form) and the Go one (options, and
// every error). Both must give the caller the same stdout, stderr and exit
// code, byte for byte.
func TestSessionExecFastPathMatchesGo(t *testing.T) {
	ws := userDir(t)
	name := startSession(t, ws)
	goPath := []string{"HUTCH_NO_FAST_EXEC=1"}
	cases := [][]string{
		{"--", "/bin/sh", "-c", `printf 'out\n'; printf 'err\n' >&2; exit 3`},
		{"/bin/sh", "-c", `printf '%s|' "$@"`, "x", "a b", "tab\there", "quote\"back\\slash", "ünï\x01ctrl"},
		{"--", "/bin/sh", "-c", `kill -TERM $$`},
		{"--", "no-such-command-here"},
		{"--", "/bin/sh", "-c", `python3 -c 'import ctypes; ctypes.CDLL(None).syscall(250, 0)'`},
		{"--", "/bin/sh", "-c", `echo "$FASTPATH_VAR"`},
	}
	env := []string{"FASTPATH_VAR=from the caller's environment"}
	for _, c := range cases {
		args := append([]string{"exec", name}, c...)
		fast := hutch(t, opts{dir: ws, env: env}, args...)
		slow := hutch(t, opts{dir: ws, env: append(env, goPath...)}, args...)
		if fast.code != slow.code || fast.stdout != slow.stdout || fast.stderr != slow.stderr {
			t.Errorf("exec %q:\nfast: code %d stdout %q stderr %q\ngo:   code %d stdout %q stderr %q",
				c, fast.code, fast.stdout, fast.stderr, slow.code, slow.stdout, slow.stderr)
		}
	}
	// The test must not pass by running the Go path twice: the fast path
	// starts no Go runtime, so it has no Go threads to show.
	r := hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", "echo ok")
	mustCode(t, r, 0)
	cmd := hutchCmd(opts{dir: ws}, "exec", name, "--", "/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	time.Sleep(500 * time.Millisecond)
	if n := threadsOf(cmd.Process.Pid); n != 1 {
		t.Errorf("hutch exec (plain form) runs %d threads; the C fast path runs one", n)
	}
	// A signal to the client reaches the command.
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Errorf("hutch exec after SIGTERM: %v, want exit 143 (the command killed by SIGTERM)", err)
	}
}

func threadsOf(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// warmSpawner runs a session's first two commands: the second starts the
// spawner, and every later command starts from it.
func warmSpawner(t *testing.T, ws, name string) {
	t.Helper()
	for i := 0; i < 2; i++ {
		mustCode(t, hutch(t, opts{dir: ws}, "exec", name, "--", "true"), 0)
	}
}

// spawnerPid finds the session's spawner on the host: with no command
// running, the init's children are the spawner and the reaper it made
// ahead of the next command (and, briefly, the last command's reaper: its
// end is reported before it exits); the spawner is the oldest.
func spawnerPid(t *testing.T, ws, name string) int {
	t.Helper()
	inits := initsOf(sessionPid(t, ws, name))
	if len(inits) != 1 {
		t.Fatalf("session %s has inits %v", name, inits)
	}
	var kids []string
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", inits[0], inits[0]))
		if err != nil {
			t.Skipf("cannot list the init's children (CONFIG_PROC_CHILDREN): %v", err)
		}
		kids = strings.Fields(string(b))
		if (len(kids) >= 1 && len(kids) <= 2) || time.Now().After(deadline) {
			break
		}
	}
	if len(kids) < 1 || len(kids) > 2 {
		t.Fatalf("the init has children %v, want the spawner and at most the reaper made ahead", kids)
	}
	oldest, oldestStart := 0, uint64(0)
	for _, k := range kids {
		pid, _ := strconv.Atoi(k)
		if st := startTicks(pid); oldest == 0 || st < oldestStart {
			oldest, oldestStart = pid, st
		}
	}
	return oldest
}

// statFields is /proc/PID/stat after the command name: f[0] is field 3
// (the state), f[1] the parent's pid, f[19] the start time; nil when the
// process is gone.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if err != nil || i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// startTicks is a process's start time (field 22 of /proc/PID/stat).
func startTicks(pid int) uint64 {
	f := statFields(pid)
	if len(f) < 20 {
		return ^uint64(0)
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// The spawner and the reaper it forks ahead of the next command are out of
// the commands' reach: they cannot signal them, read their memory,
// environment or descriptors; and they run under the same restrictions as
// the commands do.
func TestSessionSpawnerIsolated(t *testing.T) {
	ws := userDir(t)
	name := startSession(t, ws)
	warmSpawner(t, ws, name)
	host := spawnerPid(t, ws, name)
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", host))
	var inner string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "NSpid:" {
			inner = f[len(f)-1]
		}
	}
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the spawner lacks %q:\n%s", want, b)
		}
	}
	// The reaper made ahead is the init's process other than the spawner
	// and this command's own reaper (the shell's parent); it is made as
	// this command starts.
	script := `S=` + inner + `
R=
for i in $(seq 100); do
	for p in /proc/[0-9]*; do
		q=${p#/proc/}
		case $q in 1|$S|$PPID|$$) continue;; esac
		[ "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" = "hutch:init " ] && R=$q
	done
	[ -n "$R" ] && break
	sleep 0.05
done
echo "ahead: ${R:-none}"
grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/$R/status | sed 's/^/ahead /'
echo "init comm: $(cat /proc/1/comm)"
echo "own reaper comm: $(cat /proc/$PPID/comm)"
head -c1 /proc/$PPID/environ >/dev/null 2>&1 && echo "own reaper read environ: yes" || echo "own reaper read environ: no"
for who in S R; do
	eval P=\$$who
	echo "$who cmdline: $(tr '\0' ' ' < /proc/$P/cmdline)"
	echo "$who comm: $(cat /proc/$P/comm)"
	for f in fd/3 mem environ; do head -c1 /proc/$P/$f >/dev/null 2>&1 && echo "$who read $f: yes" || echo "$who read $f: no"; done
	for sig in STOP KILL 0; do kill -$sig $P 2>/dev/null && echo "$who signal $sig: yes" || echo "$who signal $sig: no"; done
done
`
	r := hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", script)
	mustCode(t, r, 0)
	if strings.Contains(r.stdout, "ahead: none") {
		t.Errorf("no reaper made ahead of the next command:\n%s%s", r.stdout, r.stderr)
	}
	for _, want := range []string{"ahead NoNewPrivs:\t1", "ahead Seccomp:\t2", "ahead CapEff:\t0000000000000000", "ahead CapBnd:\t0000000000000000"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the reaper made ahead lacks %q:\n%s", want, r.stdout)
		}
	}
	// Each of hutch's processes says its role in ps (PR_SET_NAME).
	for _, want := range []string{"init comm: hutch:init\n", "own reaper comm: hutch:reaper\n", "S comm: hutch:spawner\n", "R comm: hutch:reaper\n", "own reaper read environ: no\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("want %q in:\n%s", want, r.stdout)
		}
	}
	for _, who := range []string{"S", "R"} {
		for _, want := range []string{"cmdline: hutch:init", "read fd/3: no", "read mem: no", "read environ: no", "signal STOP: no", "signal KILL: no", "signal 0: no"} {
			if !strings.Contains(r.stdout, who+" "+want) {
				t.Errorf("probing %s (S: the spawner, pid %s inside; R: the reaper made ahead): want %q in:\n%s%s", who, inner, want, r.stdout, r.stderr)
			}
		}
	}
	r = hutch(t, opts{dir: ws}, "exec", name, "--", "echo", "still serving")
	mustCode(t, r, 0)
}

// Two commands from the spawner at once: neither can signal the other, and
// each one's seccomp denials are reported to it alone, though they share the
// spawner's listener.
func TestSessionSpawnerConcurrentCommands(t *testing.T) {
	ws := userDir(t)
	probeIn(t, ws)
	name := startSession(t, ws)
	warmSpawner(t, ws, name)
	var wg sync.WaitGroup
	var a, b result
	wg.Add(2)
	go func() {
		defer wg.Done()
		a = hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", `echo $$ > /tmp/a.pid; sleep 2; ./probe keyctl; echo a done`)
	}()
	go func() {
		defer wg.Done()
		b = hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c",
			`while [ ! -s /tmp/a.pid ]; do sleep 0.05; done; kill -TERM "$(cat /tmp/a.pid)" 2>/dev/null && echo "killed a" || echo "cannot signal a"; kill -0 1 2>/dev/null; echo b done`)
	}()
	wg.Wait()
	mustCode(t, a, 0)
	mustCode(t, b, 0)
	if !strings.Contains(b.stdout, "cannot signal a") || !strings.Contains(a.stdout, "a done") {
		t.Errorf("one command could signal another:\na: %s\nb: %s", a.stdout, b.stdout)
	}
	if !strings.Contains(a.stderr, "blocked by seccomp policy: keyctl (1 time)") || strings.Contains(a.stderr, "pid 1") {
		t.Errorf("command a's denials:\n%s\nstdout:\n%s\nb stderr:\n%s", a.stderr, a.stdout, b.stderr)
	}
	if !strings.Contains(b.stderr, "blocked by seccomp policy: kill of the sandbox's init (pid 1) (1 time)") || strings.Contains(b.stderr, "keyctl") {
		t.Errorf("command b's denials:\n%s", b.stderr)
	}
}

// When the spawner is gone, commands start the direct way: nothing fails.
// sessionWithoutSpawner starts a session in ws whose spawner the test then
// kills from the host: its next command finds it gone.
func sessionWithoutSpawner(t *testing.T, ws string) string {
	t.Helper()
	name := startSession(t, ws)
	warmSpawner(t, ws, name)
	pid := spawnerPid(t, ws, name)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the spawner (host pid %d): %v", pid, err)
	}
	return name
}

func TestSessionSpawnerGone(t *testing.T) {
	ws := userDir(t)
	name := sessionWithoutSpawner(t, ws)
	for i := 0; i < 3; i++ {
		r := hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status")
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, "NoNewPrivs:\t1") || !strings.Contains(r.stdout, "Seccomp:\t2") {
			t.Errorf("exec %d after the spawner died:\n%s%s", i, r.stdout, r.stderr)
		}
	}
}

// A command started by the spawner ends with its exact status, which the
// init reports from the reaper's end record (before the reaper itself is
// gone): exit codes, a death by signal, a command that could not be
// executed (with the reason), and a timeout that kills it.
func TestSessionSpawnedExitStatus(t *testing.T) {
	ws := userDir(t)
	if err := os.WriteFile(filepath.Join(ws, "noexec.sh"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	name := startSession(t, ws)
	warmSpawner(t, ws, name)
	spawnerPid(t, ws, name) // the commands below start from it
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"true"}, 0, ""},
		{[]string{"/bin/sh", "-c", "exit 3"}, 3, ""},
		{[]string{"/bin/sh", "-c", "exit 255"}, 255, ""},
		{[]string{"/bin/sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		{[]string{"/bin/sh", "-c", "kill -KILL $$"}, 128 + 9, ""},
		{[]string{"/bin/sh", "-c", "sleep 600 & sleep 600 & exit 7"}, 7, ""},
		{[]string{"no-such-command-here"}, 127, "hutch: command not found: no-such-command-here"},
		{[]string{"./noexec.sh"}, 126, "hutch: cannot execute ./noexec.sh: execute the command: permission denied"},
		{[]string{"--timeout", "1s", name, "--", "sleep", "600"}, 124, "hutch: timed out after 1s"},
	} {
		args := append([]string{"exec", name, "--"}, c.args...)
		if c.args[0] == "--timeout" {
			args = append([]string{"exec"}, c.args...)
		}
		r := hutch(t, opts{dir: ws}, args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.stderr) {
			t.Errorf("exec %q: exit %d, stderr %q; want exit %d, stderr with %q", c.args, r.code, r.stderr, c.code, c.stderr)
		}
	}
	r := hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", "ps -eo args | grep -c '[s]leep 600'")
	if strings.TrimSpace(r.stdout) != "0" {
		t.Errorf("processes left behind by the commands above: %q", r.stdout)
	}
}
