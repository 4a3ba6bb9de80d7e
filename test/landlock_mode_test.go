package test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The landlock isolation (sandbox.isolation = "landlock", no namespaces):
// the hardening checks of the namespaces isolation that apply to it, as the
// unprivileged user and as root, each checked on the real kernel boundary.

// landlockWorkspace is a workspace with a git repository (whose .git/config
// and .git/hooks are protected), a subdirectory and a file, owned by the
// user hutch runs as, and a secret beside it (outside the workspace).
func landlockWorkspace(t *testing.T, o opts) (ws, secret string) {
	t.Helper()
	base := userDir(t)
	ws = filepath.Join(base, "ws")
	for _, d := range []string{ws + "/sub", ws + "/.git/hooks", ws + "/.git/objects"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, c := range map[string]string{ws + "/README": "readme\n", ws + "/.git/config": "[core]\n", ws + "/.git/HEAD": "ref: refs/heads/main\n"} {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	secret = filepath.Join(base, "secret-token")
	if err := os.WriteFile(secret, []byte("TOPSECRET\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ownTree(t, o, base)
	return ws, secret
}

// hostSleeper starts a process outside any sandbox as the user hutch runs
// as under o, and returns it (killed at the test's end).
func hostSleeper(t *testing.T, o opts) *exec.Cmd {
	t.Helper()
	c := exec.Command("/bin/sleep", "300")
	if asRoot && !o.root {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(testUID), Gid: uint32(testGID), NoSetGroups: true}}
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c
}

func TestLandlockIsolationHardening(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws, secret := landlockWorkspace(t, o)
		logPath := filepath.Join(userDir(t), "sec.log")
		origin := origin(t, false)
		// A host loopback service that is not the proxy.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("LOOPBACK-SERVICE\n"))
				c.Close()
			}
		}()
		lport := ln.Addr().(*net.TCPAddr).Port
		sleeper := hostSleeper(t, o)
		script := fmt.Sprintf(`
grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status
cat %[1]s 2>/dev/null && echo SECRET-READ
touch /usr/bin/hutch-probe 2>/dev/null && echo TOOLING-WRITTEN
touch /tmp/hutch-probe-$$ 2>/dev/null && echo TMP-WRITTEN
echo data > sub/new && echo WS-SUBDIR-WRITABLE
echo more >> README && echo WS-FILE-WRITABLE
echo evil >> .git/config 2>/dev/null && echo GIT-CONFIG-WRITTEN
touch .git/hooks/pre-commit 2>/dev/null && echo HOOK-CREATED
echo ok > "$TMPDIR/t" && echo TMPDIR-WRITABLE
echo ok > "$HOME/h" && echo HOME-WRITABLE
python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)' 2>/dev/null && echo UDP-MADE
python3 -c 'import socket; socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)' 2>/dev/null && echo UNIX-MADE
python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0))' 2>/dev/null && echo TCP-BOUND
python3 -c 'import socket; s=socket.socket(); s.listen(1)' 2>/dev/null && echo TCP-LISTENING
python3 -c 'import socket; s=socket.socket(); s.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", %[2]d)); print(s.recv(64).decode())' 2>/dev/null && echo FASTOPEN-REACHED
python3 -c 'import socket; s=socket.create_connection(("127.0.0.1", %[2]d), 5); print(s.recv(64).decode())' 2>/dev/null && echo LOOPBACK-REACHED
curl -sS -m 10 http://origin.test:%[3]d/through-proxy
echo
kill -0 %[4]d 2>/dev/null && echo SIGNALLED-OUTSIDE
cat /proc/%[4]d/environ >/dev/null 2>&1 && echo ENVIRON-READ
true`, secret, lport, origin, sleeper.Process.Pid)
		o.dir = ws
		r := hutch(t, o, "run", "--isolation", "landlock", "--security-log", logPath, "--no-discover",
			"--allow", fmt.Sprintf("origin.test:%d=127.0.0.1", origin), "--", "/bin/sh", "-c", script)
		mustCode(t, r, 0)
		for _, want := range []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2",
			"WS-SUBDIR-WRITABLE", "WS-FILE-WRITABLE", "TMPDIR-WRITABLE", "HOME-WRITABLE", "path /through-proxy"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, r.stdout, r.stderr)
			}
		}
		for _, bad := range []string{"TOPSECRET", "SECRET-READ", "TOOLING-WRITTEN", "TMP-WRITTEN", "GIT-CONFIG-WRITTEN", "HOOK-CREATED",
			"UDP-MADE", "UNIX-MADE", "TCP-BOUND", "TCP-LISTENING", "FASTOPEN-REACHED", "LOOPBACK-SERVICE", "LOOPBACK-REACHED", "SIGNALLED-OUTSIDE", "ENVIRON-READ"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("stdout has %q: the landlock isolation let it through:\n%s", bad, r.stdout)
			}
		}
		for _, want := range []string{
			fmt.Sprintf("hutch: network blocked by policy: direct connection to 127.0.0.1:%d (only the egress proxy is reachable)", lport),
			"hutch: blocked by seccomp policy: socket AF_INET SOCK_DGRAM",
			"hutch: blocked by seccomp policy: listen",
		} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
			}
		}
		// Refused quietly, as glibc's lookups try nscd's socket (and a
		// namespace sandbox has no such socket to report).
		if strings.Contains(r.stderr, "AF_UNIX") {
			t.Errorf("unix socket refusals reported:\n%s", r.stderr)
		}
		if got, _ := os.ReadFile(filepath.Join(ws, ".git/config")); string(got) != "[core]\n" {
			t.Errorf(".git/config changed: %q", got)
		}
		if _, err := os.Stat(filepath.Join(ws, ".git/hooks/pre-commit")); err == nil {
			t.Error(".git/hooks/pre-commit was created")
		}
		if !hasEvent(logEvents(t, logPath), "network", fmt.Sprintf("direct 127.0.0.1:%d", lport), "WARN") {
			t.Error("the direct connection is not in the security log")
		}
		if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("the host process the sandbox tried to signal is gone: %v", err)
		}
	})
}

// Everything a command started is gone when it ends, daemons too, and when
// hutch is killed with SIGKILL while the command runs.
func TestLandlockIsolationLifecycle(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws, _ := landlockWorkspace(t, o)
		o.dir = ws
		mark := uniqueMarker(t)
		r := hutch(t, o, "run", "--isolation", "landlock", "--no-discover", "--", "/bin/sh", "-c",
			fmt.Sprintf(`setsid sh -c 'sleep 1000; : %[1]s' >/dev/null 2>&1 & (sh -c 'sleep 1000; : %[1]s' >/dev/null 2>&1 &); echo started`, mark))
		mustCode(t, r, 0)
		waitGone(t, mark, 3*time.Second)

		mark = uniqueMarker(t)
		cmd := hutchCmd(o, "run", "--isolation", "landlock", "--no-discover", "--", "/bin/sh", "-c",
			fmt.Sprintf(`setsid sh -c 'sleep 1000; : %[1]s' >/dev/null 2>&1 & sh -c 'sleep 1000; : %[1]s'`, mark))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		// The two `sh -c 'sleep 1000; : MARK'` of the command; hutch's own
		// cmdline (and that of a process it forks before the init is
		// renamed) carries the mark too, so count only those shells.
		shells := func() (n int) {
			for _, pid := range processesWith(mark) {
				if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(b), "sh\x00-c\x00sleep 1000") {
					n++
				}
			}
			return n
		}
		for shells() < 2 {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the command's processes did not start: %v", processesWith(mark))
			}
			time.Sleep(20 * time.Millisecond)
		}
		var inits []int
		for _, pid := range processesWith("hutch:init") {
			if ppid(pid) == cmd.Process.Pid {
				inits = append(inits, pid)
			}
		}
		if len(inits) != 1 {
			t.Errorf("hutch %d has %d inits: %v", cmd.Process.Pid, len(inits), inits)
		}
		cmd.Process.Kill() // SIGKILL: no teardown of hutch's own
		cmd.Wait()
		waitGone(t, mark, 5*time.Second)
		for _, pid := range inits {
			for end := time.Now().Add(5 * time.Second); ppid(pid) != 0; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("hutch's init %d outlived hutch", pid)
				}
			}
		}
	})
}

// ppid is pid's parent, or 0 when pid is gone (or a zombie).
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 || f[0] == "Z" {
		return 0
	}
	var p int
	fmt.Sscan(f[1], &p)
	return p
}

// hostUserns reports whether this host lets the suite create a user
// namespace (inside a container with Docker's default seccomp profile it
// does not: there the tests below run on the real thing).
func hostUserns() bool {
	return exec.Command("/usr/bin/unshare", "--user", "--map-root-user", "true").Run() == nil
}

// withoutUserns makes cmd (hutchCmd's) run hutch in a user namespace of
// its own whose user.max_user_namespaces is 0: a host where hutch cannot
// create user namespaces (as in a container with Docker's default seccomp
// profile), without touching the host's sysctls. On a host that has none
// to begin with, cmd is left as it is.
func withoutUserns(cmd *exec.Cmd) *exec.Cmd {
	if !hostUserns() {
		return cmd
	}
	cmd.Path = "/usr/bin/unshare"
	cmd.Args = append([]string{"unshare", "--user", "--map-root-user", "/bin/sh", "-c",
		`echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" "$@"`, hutchBin}, cmd.Args[1:]...)
	return cmd
}

func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", cmd.Args, err)
	}
	return r
}

// isolation = "auto": namespaces where they can be made; where they
// cannot, the landlock isolation with a warning shown once (best effort),
// results that say so (--json), and a refusal under strict enforcement.
func TestLandlockIsolationAuto(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws, _ := landlockWorkspace(t, o)
		o.dir = ws
		script := `echo "home=$HOME"`
		warning := "hutch: warning: user namespaces cannot be created here ("
		cause := ""
		if hostUserns() {
			r := hutch(t, o, "run", "--isolation", "auto", "--no-discover", "--", "/bin/sh", "-c", script)
			mustCode(t, r, 0)
			if !strings.Contains(r.stdout, "home=/home/sandbox") || strings.Contains(r.stderr, "user namespaces cannot be created") {
				t.Errorf("auto on a host with user namespaces: not the namespaces isolation:\n%s\n%s", r.stdout, r.stderr)
			}
			// The cause, after what the container diagnosis may put first
			// (a host with /.dockerenv is taken for a Docker container).
			cause = "user namespaces are disabled (user.max_user_namespaces = 0)"
		}
		r := runCmd(t, withoutUserns(hutchCmd(o, "run", "--isolation", "auto", "--no-discover", "--", "/bin/sh", "-c", script)))
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, "home="+stateDir) || !strings.Contains(r.stderr, warning) || !strings.Contains(r.stderr, cause) {
			t.Errorf("auto without user namespaces: want the landlock isolation (HOME in hutch's runtime directory %s) and the warning:\n%s\n%s", stateDir, r.stdout, r.stderr)
		}
		r = runCmd(t, withoutUserns(hutchCmd(o, "run", "--isolation", "auto", "--no-discover", "--json", "--", "/bin/sh", "-c", script)))
		mustCode(t, r, 0)
		if strings.Contains(r.stderr, warning) || strings.Contains(r.stdout, warning) {
			t.Errorf("the warning came twice:\n%s\n%s", r.stdout, r.stderr)
		}
		var res struct {
			Isolation       string   `json:"isolation"`
			IsolationLimits []string `json:"isolation_limits"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("--json: %v\n%s", err, r.stdout)
		}
		if res.Isolation != "landlock" || len(res.IsolationLimits) < 5 || !strings.HasPrefix(res.IsolationLimits[0], "host files are denied (EACCES) rather than hidden") {
			t.Errorf("--json result does not say what the landlock isolation lacks: %+v", res)
		}

		pol := filepath.Join(userDir(t), "strict.toml")
		writeUserFile(t, pol, "version = 1\nenforcement = \"strict\"\n[sandbox]\nisolation = \"auto\"\n")
		r = runCmd(t, withoutUserns(hutchCmd(o, "run", "--policy", pol, "--no-discover", "--", "true")))
		if want := `hutch: cannot set up the sandbox: sandbox.isolation = "auto" with enforcement = "strict": user namespaces cannot be created here`; r.code != 125 || !strings.Contains(r.stderr, want) {
			t.Errorf("strict auto without user namespaces: exit %d, want 125 and %q:\n%s", r.code, want, r.stderr)
		}
	})
}

// A session in the landlock isolation: its scratch HOME persists between
// commands, each command's processes end with it, the results say which
// isolation ran them, and stopping it leaves no process nor scratch
// directory.
func TestLandlockIsolationSession(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws, _ := landlockWorkspace(t, o)
		o.dir = ws
		name := startSessionWith(t, o, "--isolation", "landlock", "--no-discover")
		r := hutch(t, o, "exec", name, "--", "/bin/sh", "-c", `echo kept > "$HOME/state"; echo "home=$HOME"`)
		mustCode(t, r, 0)
		home := strings.TrimSpace(strings.TrimPrefix(r.stdout, "home="))
		if !strings.Contains(home, "/hutch/scratch/sandbox-") {
			t.Fatalf("HOME %q is not a scratch directory:\n%s", home, r.stderr)
		}
		mark := uniqueMarker(t)
		r = hutch(t, o, "exec", name, "--", "/bin/sh", "-c", fmt.Sprintf(`cat "$HOME/state"; setsid sh -c 'sleep 1000; : %s' >/dev/null 2>&1 &`, mark))
		mustCode(t, r, 0)
		if r.stdout != "kept\n" {
			t.Errorf("HOME did not persist between commands: %q", r.stdout)
		}
		waitGone(t, mark, 3*time.Second)
		r = hutch(t, o, "exec", "--json", name, "--", "true")
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, `"isolation": "landlock"`) || !strings.Contains(r.stdout, `"isolation_limits": [`) {
			t.Errorf("exec --json does not name the isolation:\n%s", r.stdout)
		}
		mustCode(t, hutch(t, o, "session", "stop", name), 0)
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, err := os.Stat(filepath.Dir(home)); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("scratch directory %s left after the session stopped", filepath.Dir(home))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// resources.pids holds in the landlock isolation: by the cgroup where one
// is delegated, else by RLIMIT_NPROC over the host user's tasks (which
// does not bind root).
func TestLandlockIsolationProcessLimit(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws, _ := landlockWorkspace(t, o)
		o.dir = ws
		p := hutch(t, o, "plan", "--json", "--isolation", "landlock", "--pids", "40", "--", "true")
		mustCode(t, p, 0)
		if o.root && !strings.Contains(p.stdout, `"cgroup": {`) {
			t.Skip("root without a cgroup here: RLIMIT_NPROC does not bind root, so nothing caps its processes (docs/ISOLATION.md)")
		}
		mark := uniqueMarker(t)
		r := hutch(t, o, "run", "--isolation", "landlock", "--no-discover", "--pids", "40", "--", "python3", "-c", `
import os, sys, time
n = 0
for i in range(100):
    try:
        pid = os.fork()
    except OSError as e:
        print("fork failed:", e)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print("forked", n)
`, mark)
		mustCode(t, r, 0)
		if running := len(processesWith(mark)); running > 0 {
			t.Errorf("%d processes left after the run", running)
		}
		var n int
		for _, l := range strings.Split(r.stdout, "\n") {
			fmt.Sscanf(l, "forked %d", &n)
		}
		if n == 0 || n > 40 || !strings.Contains(r.stdout, "fork failed: [Errno 11]") {
			t.Errorf("under --pids 40, %d forks succeeded, want at most 40 and a refused one:\n%s\n%s", n, r.stdout, r.stderr)
		}
	})
}

// hutch mcp in the landlock isolation: the tool's description and each
// run_command result say so, and what it does not give.
func TestLandlockIsolationMCP(t *testing.T) {
	ws, _ := landlockWorkspace(t, opts{})
	m := startMCP(t, hutchCmd(opts{dir: ws}, "mcp", "--isolation", "landlock", "--net", "none"))
	tools := m.call(2, "tools/list", map[string]any{})
	if d := fmt.Sprint(tools["result"]); !strings.Contains(d, "made without namespaces (isolation landlock)") || !strings.Contains(d, "host files are denied (EACCES) rather than hidden") {
		t.Errorf("the tool description does not say the isolation: %s", d)
	}
	sc, res := m.runCommand(3, "echo ok")
	if sc == nil || sc["stdout"] != "ok\n" || sc["isolation"] != "landlock" {
		t.Fatalf("run_command: %v; stderr:\n%s", res, m.stderr.String())
	}
	if l, _ := sc["isolation_limits"].([]any); len(l) < 5 {
		t.Errorf("isolation_limits: %v", sc["isolation_limits"])
	}
}
