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
	if strings.Contains(r.stderr, "capped only per process") {
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
