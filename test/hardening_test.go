package test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	probeOnce sync.Once
	probeBin  []byte
	probeErr  error
)

// probeIn builds the static syscall probe (testdata/probe.c) once and
// copies it into the workspace ws.
func probeIn(t *testing.T, ws string) {
	t.Helper()
	probeOnce.Do(func() {
		out := filepath.Join(os.TempDir(), "hutch-probe-"+strings.ReplaceAll(t.Name(), "/", "_"))
		cmd := exec.Command("gcc", "-static", "-O1", "-Wall", "-o", out, "testdata/probe.c")
		if b, err := cmd.CombinedOutput(); err != nil {
			probeErr = err
			probeBin = b
			return
		}
		probeBin, probeErr = os.ReadFile(out)
		os.Remove(out)
	})
	if probeErr != nil {
		t.Fatalf("build testdata/probe.c: %v\n%s", probeErr, probeBin)
	}
	p := filepath.Join(ws, "probe")
	if err := os.WriteFile(p, probeBin, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(p, testUID, testGID)
}

// logEvents reads a security log.
func logEvents(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("security log: %v", err)
	}
	defer f.Close()
	var evs []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("security log line is not JSON: %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// Every denied family fails with EPERM (clone3 with ENOSYS, so libc falls
// back to clone), is summarized on stderr, and is in the security log.
func TestSeccompDenialsReportedAndLogged(t *testing.T) {
	ws := userDir(t)
	probeIn(t, ws)
	logPath := filepath.Join(userDir(t), "security.log")
	calls := map[string]struct{ errno, summary string }{
		"unshare":           {"EPERM", "unshare CLONE_NEWUSER"},
		"clone-newuser":     {"EPERM", "clone CLONE_NEWUSER"},
		"mount":             {"EPERM", "mount"},
		"ptrace":            {"EPERM", "ptrace"},
		"keyctl":            {"EPERM", "keyctl"},
		"bpf":               {"EPERM", "bpf"},
		"perf_event_open":   {"EPERM", "perf_event_open"},
		"userfaultfd":       {"EPERM", "userfaultfd"},
		"io_uring_setup":    {"EPERM", "io_uring_setup"},
		"open_by_handle_at": {"EPERM", "open_by_handle_at"},
		"tiocsti":           {"EPERM", "ioctl TIOCSTI"},
		"clone3":            {"ENOSYS", ""},
		"getpid":            {"ok", ""},
	}
	// ptrace is among the denials with seccomp.ptrace off (it is on by
	// default: TestPtracePolicy).
	args := []string{"run", "--allow-ptrace=false", "--security-log", logPath, "--", "./probe"}
	for c := range calls {
		args = append(args, c)
	}
	r := hutch(t, opts{dir: ws}, args...)
	mustCode(t, r, 0)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 {
			got[f[0]] = f[1]
		}
	}
	evs := logEvents(t, logPath)
	for c, want := range calls {
		if got[c] != want.errno {
			t.Errorf("%s inside: %q, want %s", c, got[c], want.errno)
		}
		if want.summary == "" {
			continue
		}
		line := "hutch: blocked by seccomp policy: " + want.summary + " "
		if !strings.Contains(r.stderr, line) || !strings.Contains(r.stderr, "; see docs/SECCOMP.md") {
			t.Errorf("stderr lacks the summary %q:\n%s", line, r.stderr)
		}
		found := false
		for _, ev := range evs {
			if ev["kind"] == "seccomp" && strings.HasPrefix(ev["subject"].(string), want.summary) && ev["level"] == "WARN" {
				found = true
				if ev["sandbox"] == "" || !strings.Contains(ev["command"].(string), "./probe") {
					t.Errorf("event lacks sandbox id or command: %v", ev)
				}
			}
		}
		if !found {
			t.Errorf("security log lacks a seccomp event for %s", want.summary)
		}
	}
	if strings.Contains(r.stderr, "clone3") {
		t.Errorf("clone3's ENOSYS fallback must stay quiet:\n%s", r.stderr)
	}
}

// hutch's processes in a one-off sandbox say their roles in ps, and the
// command's reaper (its parent) is not dumpable: the command cannot read its
// memory, environment or descriptors.
func TestRoleNamesAndReaperNotDumpable(t *testing.T) {
	ws := userDir(t)
	r := hutch(t, opts{dir: ws}, "run", "--", "/bin/sh", "-c", `cat /proc/1/comm /proc/$PPID/comm
for f in environ mem fd/0; do head -c1 /proc/$PPID/$f >/dev/null 2>&1 && echo "reaper $f: readable" || echo "reaper $f: closed"; done`)
	mustCode(t, r, 0)
	for _, want := range []string{"hutch:init\nhutch:reaper\n", "reaper environ: closed", "reaper mem: closed", "reaper fd/0: closed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("want %q in:\n%s%s", want, r.stdout, r.stderr)
		}
	}
}

func TestSeccompAndNoNewPrivsInStatus(t *testing.T) {
	ws := userDir(t)
	r := sandboxSh(t, ws, `grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status`)
	mustCode(t, r, 0)
	if !strings.Contains(r.stdout, "Seccomp:\t2") || !strings.Contains(r.stdout, "NoNewPrivs:\t1") {
		t.Errorf("status:\n%s", r.stdout)
	}
}

// Landlock holds where the mount layer alone would not: a file in the
// sandbox's view but outside every grant is unreadable and pid 1 cannot
// be signalled. TCP is left to the network namespace (TestLoopbackIsTheSandboxs).
func TestLandlockRestrictions(t *testing.T) {
	ws := userDir(t)
	probeIn(t, ws)
	r := sandboxSh(t, ws, `ls -a / | grep -c hutchenv; cat /.hutchenv 2>&1; ./probe kill1`)
	mustCode(t, r, 0)
	for _, want := range []string{"1\n", "cat: /.hutchenv: Permission denied", "kill1 EPERM"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in:\n%s", want, r.stdout)
		}
	}
}

// Ordinary development work still works under seccomp and Landlock: a Go
// module built and tested with the host's go, a C program with gcc, git,
// and python3 with threads.
func TestRealWorkloads(t *testing.T) {
	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		t.Fatalf("the host's Go toolchain is expected at /usr/local/go: %v", err)
	}
	ws := userDir(t)
	writeUserFile(t, filepath.Join(ws, "mod", "go.mod"), "module example.com/m\n\ngo 1.21\n")
	writeUserFile(t, filepath.Join(ws, "mod", "m.go"), "package m\n\nfunc Add(a, b int) int { return a + b }\n")
	writeUserFile(t, filepath.Join(ws, "mod", "m_test.go"), "package m\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"bad\")\n\t}\n}\n")
	writeUserFile(t, filepath.Join(ws, "hello.c"), "#include <stdio.h>\n#include <pthread.h>\nstatic void *f(void *a) { return a; }\nint main(void) { pthread_t t; pthread_create(&t, 0, f, 0); pthread_join(t, 0); printf(\"hello from c\\n\"); return 0; }\n")
	writeUserFile(t, filepath.Join(ws, "t.py"), "import threading\nout = []\nts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]\n[t.start() for t in ts]\n[t.join() for t in ts]\nprint('python threads', sorted(out) == list(range(8)))\n")
	script := `set -e
export PATH=/usr/local/go/bin:$PATH GOFLAGS=-mod=mod GOTOOLCHAIN=local GOPROXY=off
cd mod && go test ./... 2>&1 | tail -1 && go build -o /tmp/m.a . && echo go-ok && cd ..
gcc -O1 -pthread -o /tmp/hello hello.c && /tmp/hello
mkdir /tmp/repo && cd /tmp/repo && git init -q && git config user.email a@b.c && git config user.name sb
echo x > f && git add f && git commit -qm init && git log --oneline | wc -l && cd /workspace
python3 t.py
sleep 0.1 & wait
echo all-done`
	r := hutch(t, opts{dir: ws, timeout: 5 * 60e9}, "run", "--", "/bin/sh", "-c", script)
	mustCode(t, r, 0)
	for _, want := range []string{"ok  \texample.com/m", "go-ok", "hello from c", "\n1\n", "python threads True", "all-done"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in:\n%s\nstderr:\n%s", want, r.stdout, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "blocked by seccomp") {
		t.Errorf("ordinary work was blocked:\n%s", r.stderr)
	}
}

// A Docker-format profile can replace the default; a malformed one is
// rejected with its JSON path before anything starts.
func TestCustomSeccompProfiles(t *testing.T) {
	ws := userDir(t)
	probeIn(t, ws)
	dir := userDir(t)
	good := filepath.Join(dir, "good.json")
	writeUserFile(t, good, `{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64"],
  "syscalls": [{"names": ["keyctl", "add_key"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13, "comment": "no keyrings"}]}`)
	r := hutch(t, opts{dir: ws}, "run", "--seccomp-profile", good, "--", "./probe", "keyctl", "getpid", "userfaultfd")
	mustCode(t, r, 0)
	if !strings.Contains(r.stdout, "keyctl EACCES") || !strings.Contains(r.stdout, "getpid ok") {
		t.Errorf("custom profile not applied:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "hutch: blocked by seccomp policy: keyctl (1 time)") {
		t.Errorf("custom profile denial not reported:\n%s", r.stderr)
	}

	bad := filepath.Join(dir, "bad.json")
	writeUserFile(t, bad, `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}, {"names": ["write"], "action": "SCMP_ACT_FOO"}]}`)
	m := uniqueMarker(t)
	r = hutch(t, opts{dir: ws}, "run", "--seccomp-profile", bad, "--", "/bin/sh", "-c", "touch "+m)
	mustCode(t, r, 125)
	if !strings.Contains(r.stderr, bad+": $.syscalls[1].action: unknown action \"SCMP_ACT_FOO\"") {
		t.Errorf("malformed profile error lacks the JSON path:\n%s", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, m)); err == nil {
		t.Errorf("the command ran despite the malformed profile")
	}
}

// The compiled filter is cached by the profile's hash: the second run
// loads it without compiling (observable in the debug log).
func TestSeccompFilterCache(t *testing.T) {
	ws := userDir(t)
	cache := userDir(t)
	env := []string{"XDG_CACHE_HOME=" + cache}
	r1 := hutch(t, opts{dir: ws, env: env}, "run", "--debug", "--", "true")
	mustCode(t, r1, 0)
	r2 := hutch(t, opts{dir: ws, env: env}, "run", "--debug", "--", "true")
	mustCode(t, r2, 0)
	if !strings.Contains(r1.stderr, "seccomp filter compiled") || strings.Contains(r1.stderr, "seccomp filter cache hit") {
		t.Errorf("first run should compile:\n%s", r1.stderr)
	}
	if !strings.Contains(r2.stderr, "seccomp filter cache hit") || strings.Contains(r2.stderr, "seccomp filter compiled") {
		t.Errorf("second run should hit the cache:\n%s", r2.stderr)
	}
}
