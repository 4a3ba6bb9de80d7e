package test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// hostTrueLatency measures fork+exec of /bin/true on the host (median of
// n), to show the host stays responsive while a sandbox misbehaves.
func hostTrueLatency(n int) time.Duration {
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		exec.Command("/bin/true").Run()
		ds = append(ds, time.Since(t0))
		time.Sleep(20 * time.Millisecond)
	}
	sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
	return ds[len(ds)/2]
}

// Disk: /tmp is capped by its tmpfs size; a single file in the workspace
// by the file size limit. Both hold on every host.
func TestDiskLimits(t *testing.T) {
	ws := userDir(t)
	pol := filepath.Join(userDir(t), "p.toml")
	writeUserFile(t, pol, "version = 1\n[resources]\nfile_size = \"32MiB\"\n")
	r := hutch(t, opts{dir: ws}, "run", "--policy", pol, "--tmp-size", "16MiB", "--", "/bin/sh", "-c",
		`head -c 64M /dev/zero 2>&1 > /tmp/fill; du -k /tmp/fill | cut -f1; exec head -c 64M /dev/zero > /workspace/big`)
	if r.code != 128+25 {
		t.Errorf("exit %d, want 153 (SIGXFSZ)\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "No space left on device") {
		t.Errorf("filling /tmp past 16MiB did not hit ENOSPC:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "hutch: killed: file size limit 32MiB exceeded (SIGXFSZ)") {
		t.Errorf("stderr lacks the file size message:\n%s", r.stderr)
	}
	fi, err := os.Stat(filepath.Join(ws, "big"))
	if err != nil || fi.Size() != 32<<20 {
		t.Errorf("workspace file: %v, size %d, want exactly 32MiB", err, fi.Size())
	}
}

// Without a usable cgroup (this host as an unprivileged user), rlimits
// hold: a fork bomb fails to fork, a memory hog gets MemoryError, and the
// host stays responsive.
func TestRlimitFallback(t *testing.T) {
	ws := userDir(t)
	base := hostTrueLatency(9)
	done := make(chan result, 1)
	go func() {
		done <- hutch(t, opts{dir: ws, timeout: 120 * time.Second}, "run", "--pids", "64", "--timeout", "20s", "--", "/bin/sh", "-c",
			`bomb() { bomb | bomb & }; bomb; sleep 3; echo survived`)
	}()
	time.Sleep(1500 * time.Millisecond)
	during := hostTrueLatency(9)
	r := <-done
	t.Logf("host /bin/true latency: %v before, %v during the fork bomb (backend: %s)", base, during, backendOf(r))
	if during > 20*base+50*time.Millisecond {
		t.Errorf("host unresponsive during the fork bomb: %v vs %v", during, base)
	}
	if r.code == 0 && !strings.Contains(r.stdout, "survived") {
		t.Errorf("fork bomb run: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = hutch(t, opts{dir: ws}, "run", "--memory", "256MiB", "--", "python3", "-c", `
b = []
try:
    for i in range(4096):
        b.append(bytearray(1 << 20))
    print("allocated 4GiB")
except MemoryError:
    print("MemoryError at", len(b), "MiB")
`)
	if strings.Contains(r.stdout, "allocated 4GiB") {
		t.Errorf("a 4GiB allocation succeeded under a 256MiB limit:\n%s\n%s", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "MemoryError") && r.code != 137 {
		t.Errorf("memory hog neither got MemoryError nor was killed: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// A fact of the host (a limit it cannot enforce, what its Landlock lacks)
// is logged once per user and host, not by every run: the security log
// grows with what commands do.
func TestHostFactsLoggedOnce(t *testing.T) {
	ws := userDir(t)
	cache := userDir(t)
	logf := filepath.Join(userDir(t), "security.log")
	env := []string{"XDG_CACHE_HOME=" + cache}
	lines := func() int {
		b, _ := os.ReadFile(logf)
		return strings.Count(string(b), "\n")
	}
	mustCode(t, hutch(t, opts{dir: ws, env: env}, "run", "--security-log", logf, "--", "true"), 0)
	first := lines()
	for range 3 {
		mustCode(t, hutch(t, opts{dir: ws, env: env}, "run", "--security-log", logf, "--", "true"), 0)
	}
	if first == 0 || lines() != first {
		t.Errorf("the security log had %d lines after the first run and %d after three more of /bin/true; want some, then no more", first, lines())
	}
}

// forkCounter forks children that wait until it cannot fork any more and
// says how many it made and the errno of the refusal.
const forkCounter = `import os, time
kids = []
try:
    while len(kids) < 100:
        pid = os.fork()
        if pid == 0:
            time.sleep(5)
            os._exit(0)
        kids.append(pid)
    print("forked", len(kids), "never refused")
except OSError as e:
    print("forked", len(kids), "then errno", e.errno)
for k in kids:
    os.kill(k, 9)
`

// On the rlimit backend too, the process limit is the command's own: the
// reaper has its margin; and a command that cannot even start says so.
func TestPidsLimitExact(t *testing.T) {
	ws := userDir(t)
	r := hutch(t, opts{dir: ws}, "run", "--pids", "5", "--", "python3", "-c", forkCounter)
	if !strings.Contains(r.stdout, "forked 4 then errno 11\n") {
		t.Errorf("--pids 5: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = hutch(t, opts{dir: ws}, "run", "--pids", "1", "--", "python3", "-c", forkCounter)
	if !strings.Contains(r.stdout, "forked 0 then errno 11\n") {
		t.Errorf("--pids 1: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// backendOf guesses the limits backend from a run's output.
func backendOf(r result) string {
	if strings.Contains(r.stderr, "no cgroup here") {
		return "rlimit"
	}
	return "cgroup or rlimit (warned earlier)"
}

// cgroupDirs lists hutch's cgroups in the v1 memory hierarchy and the v2
// tree.
func cgroupDirs() []string {
	var out []string
	for _, root := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.HasPrefix(d.Name(), "hutch-") {
				out = append(out, p)
				return filepath.SkipDir
			}
			if strings.Count(p, "/") > 8 {
				return filepath.SkipDir
			}
			return nil
		})
	}
	return out
}

// As root on this host, hutch uses a cgroup v1 per sandbox: the memory hog
// is OOM-killed with a message, the fork bomb refused with a count, a CPU
// spinner throttled, and no cgroup is left behind, even after the
// supervisor is SIGKILLed (the next run reaps it).
func TestCgroupV1AsRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skipf("the cgroup v1 backend needs root; this suite runs as uid %d (the rlimit backend is tested instead)", os.Getuid())
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		t.Skip("no cgroup v1 memory hierarchy on this host (the v2 backends run in the VM tier)")
	}
	ws := userDir(t)
	logPath := filepath.Join(userDir(t), "sec.log")
	before := cgroupDirs()
	root := func(args ...string) result {
		cmd := exec.Command(hutchBin, args...)
		cmd.Dir = ws
		cmd.Env = []string{"PATH=/usr/bin:/bin", "XDG_CACHE_HOME=" + filepath.Join(stateDir, "rootcache")}
		var so, se strings.Builder
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		r := result{stdout: so.String(), stderr: se.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		}
		return r
	}
	r := root("run", "--security-log", logPath, "--memory", "256MiB", "--", "python3", "-c", "b=[]\nfor i in range(4096): b.append(bytearray(1<<20))\nprint('allocated')")
	if r.code != 137 || !strings.Contains(r.stderr, "hutch: killed: memory limit 256MiB exceeded") {
		t.Errorf("memory hog: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = root("run", "--security-log", logPath, "--pids", "64", "--", "/bin/sh", "-c", "for i in $(seq 200); do sleep 2 & done 2>/dev/null; wait")
	if !strings.Contains(r.stderr, "hutch: process limit 64 reached:") {
		t.Errorf("fork bomb: exit %d\n%s", r.code, r.stderr)
	}
	// The limit the user sets is the command's, exactly: hutch's own
	// processes have their margin.
	r = root("run", "--pids", "5", "--", "python3", "-c", forkCounter)
	if !strings.Contains(r.stdout, "forked 4 then errno 11\n") || !strings.Contains(r.stderr, "hutch: process limit 5 reached: 1 fork refused") {
		t.Errorf("--pids 5 as root: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = root("run", "--security-log", logPath, "--cpus", "0.5", "--", "python3", "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass")
	if r.code != 0 {
		t.Errorf("spinner: %d %s", r.code, r.stderr)
	}
	evs := logEvents(t, logPath)
	var throttled, oom bool
	for _, ev := range evs {
		if ev["kind"] == "limit" && ev["subject"] == "cpu throttled" {
			throttled = true
		}
		if ev["kind"] == "limit" && ev["rule"] == "resources.memory" {
			oom = true
		}
	}
	if !throttled || !oom {
		t.Errorf("security log lacks limit events (cpu throttled %v, memory %v)", throttled, oom)
	}
	// SIGKILL of the supervisor: its cgroup stays until the next run reaps it.
	cmd := exec.Command(hutchBin, "run", "--", "sleep", "100")
	cmd.Dir = ws
	cmd.Start()
	time.Sleep(500 * time.Millisecond)
	cmd.Process.Kill()
	cmd.Wait()
	root("run", "--", "true")
	after := cgroupDirs()
	if len(after) > len(before) {
		t.Errorf("cgroups left behind: before %v after %v", before, after)
	}
}

// hutch doctor says what a sandbox gets here; --json for machines; exit 1
// when no sandbox can be made.
func TestDoctor(t *testing.T) {
	ws := userDir(t)
	r := hutch(t, opts{dir: ws}, "doctor", "--json")
	mustCode(t, r, 0)
	var rep struct {
		Sandbox     string            `json:"sandbox"`
		CanSandbox  bool              `json:"can_sandbox"`
		LandlockABI int               `json:"landlock_abi"`
		MCPServer   string            `json:"mcp_server"`
		Areas       map[string]string `json:"areas"`
		Cgroup      struct {
			Backend string `json:"backend"`
		} `json:"cgroup"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, r.stdout)
	}
	if !rep.CanSandbox || rep.Sandbox != "ok" || rep.LandlockABI < 1 || rep.Cgroup.Backend == "" || rep.MCPServer == "" {
		t.Errorf("doctor report: %+v", rep)
	}
	for _, a := range []string{"FILESYSTEM", "RESOURCES", "NETWORK", "LIFECYCLE"} {
		if rep.Areas[a] == "" {
			t.Errorf("area %s missing", a)
		}
	}
	// This suite's user has no cgroup here (unprivileged on a hybrid host).
	if !asRoot || testUID != 0 {
		if rep.Cgroup.Backend != "rlimit" || !strings.HasPrefix(rep.Areas["RESOURCES"], "partly") {
			t.Errorf("unprivileged on this host: backend %q, RESOURCES %q", rep.Cgroup.Backend, rep.Areas["RESOURCES"])
		}
		// How precise the watchdog is, in words.
		for _, w := range []string{"every 50ms it sums the sandbox's memory", "runs ahead of it", "reported when a look finds the limit reached", "cpus are not limited"} {
			if !strings.Contains(rep.Areas["RESOURCES"], w) {
				t.Errorf("RESOURCES does not say %q: %s", w, rep.Areas["RESOURCES"])
			}
		}
	}
	cmd := hutchCmd(opts{dir: ws}, "doctor")
	cmd.Path = "/usr/bin/unshare"
	cmd.Args = append([]string{"unshare", "--user", "--map-root-user", "/bin/sh", "-c",
		`echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" "$@"`, hutchBin}, cmd.Args[1:]...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "cannot be made") {
		t.Errorf("doctor without user namespaces: %v\n%s", err, out)
	}
}

// buildFixture runs a host tool that writes a fixture into the workspace
// (a compiler); the test skips when the tool is not installed here.
func buildFixture(t *testing.T, env []string, name string, args ...string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed on this host", name)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// Runtimes that reserve far more address space than they use start under
// the default limits on every backend: on the rlimit backend memory is the
// watchdog's, not a per-process RLIMIT_AS (2 GiB stopped the JVM, "Could
// not allocate compressed class space", and AddressSanitizer's 20 TiB of
// shadow), so they no longer fail before main.
func TestRuntimesUnderDefaultLimits(t *testing.T) {
	ws := userDir(t)
	run := func(t *testing.T, args ...string) result {
		t.Helper()
		return hutch(t, opts{dir: ws, timeout: 120 * time.Second}, append([]string{"run", "--no-discover"}, args...)...)
	}
	want := func(t *testing.T, r result, code int, out string) {
		t.Helper()
		if r.code != code || !strings.Contains(r.stdout+r.stderr, out) {
			t.Errorf("exit %d (want %d), want %q in the output:\nstdout %s\nstderr %s", r.code, code, out, r.stdout, r.stderr)
		}
	}
	t.Run("java", func(t *testing.T) {
		if _, err := exec.LookPath("java"); err != nil {
			t.Skip("no java on this host")
		}
		want(t, run(t, "--", "java", "-version"), 0, "openjdk version")
		writeUserFile(t, filepath.Join(ws, "Hello.java"), `public class Hello { public static void main(String[] a) { System.out.println("hello from java " + Runtime.getRuntime().maxMemory()); } }`+"\n")
		buildFixture(t, nil, "javac", "-d", filepath.Join(ws, "hostclasses"), filepath.Join(ws, "Hello.java"))
		want(t, run(t, "--", "java", "-cp", "/workspace/hostclasses", "Hello"), 0, "hello from java")
		// javac inside: it reads the JDK's /etc/java-*/security (the
		// host's /etc, minus the mask).
		want(t, run(t, "--", "/bin/sh", "-c", "javac -d /tmp/classes /workspace/Hello.java && java -cp /tmp/classes Hello"), 0, "hello from java")
	})
	t.Run("asan", func(t *testing.T) {
		src := filepath.Join(ws, "asan.c")
		writeUserFile(t, src, `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
	char *p = malloc(16);
	const char *what = argc > 1 ? argv[1] : "";
	if (strcmp(what, "overflow") == 0) p[16] = 1; /* one past the end: ASan must say so */
	strcpy(p, "asan ok");
	puts(p);
	if (strcmp(what, "leak") == 0) return 0; /* leaked: LeakSanitizer must say so */
	free(p);
	return 0;
}
`)
		buildFixture(t, nil, "gcc", "-g", "-fsanitize=address", "-o", filepath.Join(ws, "asan"), src)
		// LeakSanitizer's check at exit ptraces the process (seccomp.ptrace,
		// on by default).
		want(t, run(t, "--", "/workspace/asan"), 0, "asan ok")
		want(t, run(t, "--", "/workspace/asan", "overflow"), 1, "heap-buffer-overflow")
		want(t, run(t, "--", "/workspace/asan", "leak"), 1, "LeakSanitizer: detected memory leaks")
	})
	t.Run("node", func(t *testing.T) {
		if _, err := exec.LookPath("node"); err != nil {
			t.Skip("no node on this host")
		}
		want(t, run(t, "--", "node", "-e", "console.log('node', 6 * 7)"), 0, "node 42")
	})
	t.Run("go", func(t *testing.T) {
		writeUserFile(t, filepath.Join(ws, "gohello", "main.go"), "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from go\") }\n")
		writeUserFile(t, filepath.Join(ws, "gohello", "go.mod"), "module hello\n\ngo 1.21\n")
		t.Setenv("PATH", "/usr/local/go/bin:"+os.Getenv("PATH"))
		buildFixture(t, []string{"CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOCACHE=" + t.TempDir()},
			"go", "build", "-C", filepath.Join(ws, "gohello"), "-o", filepath.Join(ws, "gohello", "hello"), ".")
		want(t, run(t, "--", "/workspace/gohello/hello"), 0, "hello from go")
	})
	t.Run("python3", func(t *testing.T) {
		want(t, run(t, "--", "python3", "-c", "print('python', 6 * 7)"), 0, "python 42")
	})
}

// memoryHog allocates (and touches) 1 MiB at a time until it is stopped.
const memoryHog = `b = []
while True:
    b.append(bytearray(1 << 20))
`

// A memory hog is killed with the same words on every backend: on the
// rlimit backend by the watchdog, which measures the sandbox's memory
// (each page once, however many processes share it) and kills its largest
// process, as the OOM killer does in a cgroup.
func TestMemoryLimitKills(t *testing.T) {
	ws := userDir(t)
	logf := filepath.Join(userDir(t), "sec.log")
	r := hutch(t, opts{dir: ws}, "run", "--security-log", logf, "--memory", "256MiB", "--", "python3", "-c", memoryHog)
	if r.code != 137 || !strings.Contains(r.stderr, "hutch: killed: memory limit 256MiB exceeded") {
		t.Errorf("memory hog: exit %d (want 137)\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	var logged bool
	for _, ev := range logEvents(t, logf) {
		if ev["kind"] == "limit" && ev["rule"] == "resources.memory" {
			logged = true
			t.Logf("logged: %v", ev)
		}
	}
	if !logged {
		t.Error("the security log has no memory limit event")
	}
	// The largest process goes, not the command: its parent sees it
	// killed and goes on.
	writeUserFile(t, filepath.Join(ws, "hog.py"), memoryHog)
	r = hutch(t, opts{dir: ws}, "run", "--memory", "256MiB", "--", "python3", "-c", `import os
pid = os.fork()
if pid == 0:
    exec(open("/workspace/hog.py").read())
_, st = os.waitpid(pid, 0)
print("child killed by signal", os.WTERMSIG(st))
`)
	if r.code != 0 || !strings.Contains(r.stdout, "child killed by signal 9") || !strings.Contains(r.stderr, "hutch: killed: memory limit 256MiB exceeded") {
		t.Errorf("a child's hog: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	// Pages shared after a fork count once: 300 MiB and four children
	// (1.5 GiB of resident memory, summed) fit in 1 GiB.
	r = hutch(t, opts{dir: ws}, "run", "--memory", "1GiB", "--", "python3", "-c", `import os, time
b = bytearray(300 << 20)
kids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        time.sleep(0.5)
        os._exit(0)
    kids.append(pid)
print("statuses", [os.waitpid(k, 0)[1] for k in kids])
`)
	if r.code != 0 || !strings.Contains(r.stdout, "statuses [0, 0, 0, 0]") || strings.Contains(r.stderr, "memory limit") {
		t.Errorf("shared pages: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	// Memory shared between processes (MAP_SHARED anonymous, a tmpfs
	// file's pages) counts too.
	r = hutch(t, opts{dir: ws}, "run", "--memory", "256MiB", "--", "python3", "-c", `import mmap
ms = []
while True:
    m = mmap.mmap(-1, 1 << 20)
    m.write(b"x" * (1 << 20))
    ms.append(m)
`)
	if r.code != 137 || !strings.Contains(r.stderr, "hutch: killed: memory limit 256MiB exceeded") {
		t.Errorf("shared memory hog: exit %d\nstderr %s", r.code, r.stderr)
	}
	// In a session the hog's command ends, and the session goes on.
	name := startSession(t, ws, "--memory", "256MiB")
	r = hutch(t, opts{dir: ws}, "exec", name, "--", "python3", "-c", memoryHog)
	if r.code != 137 || !strings.Contains(r.stderr, "hutch: killed: memory limit 256MiB exceeded") {
		t.Errorf("session hog: exit %d\nstderr %s", r.code, r.stderr)
	}
	r = hutch(t, opts{dir: ws}, "exec", name, "--", "echo", "still here")
	if r.code != 0 || r.stdout != "still here\n" || strings.Contains(r.stderr, "memory limit") {
		t.Errorf("after the hog: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// A fork bomb that holds the process limit is reported on every backend:
// on the rlimit backend when the watchdog finds it reached (RLIMIT_NPROC
// itself records no refusal), which it looks for every 50ms while a
// command runs; bash retries a refused fork, so it holds.
func TestProcessLimitReported(t *testing.T) {
	ws := userDir(t)
	r := hutch(t, opts{dir: ws}, "run", "--pids", "64", "--", "bash", "-c", `for i in $(seq 200); do sleep 2 & done 2>/dev/null; wait`)
	if !strings.Contains(r.stderr, "hutch: process limit 64 reached") {
		t.Errorf("fork bomb: exit %d\nstderr %s", r.code, r.stderr)
	}
	// A fork bomb that is over before the watchdog's first look (50 ms):
	// the tree its reaper kills at the end is at the limit.
	r = hutch(t, opts{dir: ws}, "run", "--pids", "64", "--", "sh", "-c", `i=0; while [ $i -lt 80 ]; do sleep 30 & i=$((i+1)); done 2>/dev/null; exit 0`)
	if !strings.Contains(r.stderr, "hutch: process limit 64 reached") {
		t.Errorf("a quick fork bomb: exit %d\nstderr %s", r.code, r.stderr)
	}
	// Below the limit, nothing is said.
	r = hutch(t, opts{dir: ws}, "run", "--pids", "64", "--", "bash", "-c", `for i in $(seq 50); do sleep 0.3 & done; wait`)
	if r.code != 0 || strings.Contains(r.stderr, "process limit") {
		t.Errorf("50 of 64: exit %d\nstderr %s", r.code, r.stderr)
	}
}
