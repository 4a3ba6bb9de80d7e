package cgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests below create real cgroups with whatever backend Probe picks:
// cgroup1-root on the development machines (run as root), cgroup2-delegated
// in the VM tier (uid 1000, see docs/TESTING.md and docs/RESOURCES.md).
// Where no cgroup can be used they skip, printing why, and
// TestUnavailableUnprivileged checks the reason instead.
//
// Child processes are this test binary again in a helper mode (a memory
// hog, a CPU spinner, an init-like idle Go process) or /bin/sh. They wait
// for a line on stdin before doing anything, so that on cgroup v1 they are
// in the cgroup (AddProc) before they start; on cgroup v2 they are born in
// it (CLONE_INTO_CGROUP).

const (
	envHelper = "HUTCH_CGROUP_TEST_HELPER" // hog, spin, idle, newself, reap
	envGate   = "HUTCH_CGROUP_TEST_GATE"   // 1: read a line from stdin first
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envHelper); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

func helperMain(mode string) int {
	if os.Getenv(envGate) == "1" {
		bufio.NewReader(os.Stdin).ReadString('\n')
	}
	switch mode {
	case "hog":
		// 256 MiB in 1 MiB steps, every page touched.
		var keep [][]byte
		for i := 0; i < 256; i++ {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println("survived", len(keep))
		return 0
	case "spin":
		d, _ := time.ParseDuration(os.Getenv("HUTCH_CGROUP_TEST_SPIN"))
		deadline := time.Now().Add(d)
		var wg sync.WaitGroup
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				x := 0
				for time.Now().Before(deadline) {
					for k := 0; k < 100000; k++ {
						x += k
					}
				}
				_ = x
			}()
		}
		wg.Wait()
		return 0
	case "idle":
		// Roughly what the sandbox init does: signal handling, a GC, a
		// child started with os/exec and waited for.
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
		runtime.GC()
		exec.Command("sleep", "1").Run()
		fmt.Println(threadsLine())
		return 0
	case "reap":
		removed, err := ReapStale(context.Background())
		for _, r := range removed {
			fmt.Printf("REMOVED %s\n", r)
		}
		if err != nil {
			fmt.Println("ReapStale:", err)
			return 1
		}
		return 0
	case "newself":
		if err := newSelfMain(); err != nil {
			fmt.Println("newself:", err)
			return 1
		}
		fmt.Println("NEWSELF OK")
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper", mode)
	return 2
}

func threadsLine() string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Threads:") {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return "Threads: ?"
}

// vmScenario is the VM tier's scenario (test/vm/run.sh sets it for the
// payload), "" elsewhere. There the backend is known, so a test that would
// skip for want of a cgroup, or of none, fails instead.
func vmScenario() string { return os.Getenv("HUTCH_VM_SCENARIO") }

// newTestCgroup creates a cgroup or skips the test when none can be used;
// it is killed and removed when the test ends, and its removal is checked.
func newTestCgroup(t *testing.T, name string, l Limits) Cgroup {
	t.Helper()
	cg, err := New(context.Background(), name, l, Options{})
	if errors.Is(err, ErrUnavailable) {
		if vmScenario() == "delegated" {
			t.Fatalf("the VM tier's delegated scenario has a delegated cgroup v2 subtree, but New: %v", err)
		}
		t.Skipf("no cgroup can be used here (TestUnavailableUnprivileged checks this case): %v", err)
	}
	if errors.Is(err, ErrControllerMissing) {
		t.Skipf("a controller is missing: %v", err)
	}
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	paths := cg.Paths()
	t.Cleanup(func() {
		if err := cg.Remove(); err != nil {
			t.Errorf("Remove: %v", err)
		}
		for _, p := range paths {
			if exists(p) {
				t.Errorf("%s still exists after Remove", p)
			}
		}
	})
	t.Logf("%s: %s", cg.Backend(), strings.Join(paths, " "))
	return cg
}

// startIn starts cmd inside cg: born there with CLONE_INTO_CGROUP when the
// backend has an fd, else moved there with AddProc right after Start; then
// releases it (cmd must read a line from stdin first).
func startIn(t *testing.T, cg Cgroup, cmd *exec.Cmd) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	fd, useFD := cg.FD()
	if useFD {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		cg.Kill()
		cmd.Process.Kill()
		cmd.Wait()
	})
	if !useFD {
		if err := cg.AddProc(cmd.Process.Pid); err != nil {
			t.Fatalf("AddProc: %v", err)
		}
	}
	if !inCgroup(cmd.Process.Pid, filepath.Base(cg.Path())) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
		t.Fatalf("pid %d is not in %s:\n%s", cmd.Process.Pid, cg.Path(), b)
	}
	io.WriteString(stdin, "go\n")
	stdin.Close()
}

func helperCmd(t *testing.T, mode string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), envHelper+"="+mode, envGate+"=1"), env...)
	return cmd
}

// outFile returns a file for a child's stdout or stderr: with an *os.File,
// Wait does not wait for grandchildren that keep the pipe open.
func outFile(t *testing.T) *os.File {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func fileText(f *os.File) string {
	b, _ := os.ReadFile(f.Name())
	return string(b)
}

// waitTimeout waits for cmd, killing the cgroup if it takes longer than d.
func waitTimeout(t *testing.T, cg Cgroup, cmd *exec.Cmd, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Errorf("%v still running after %s: killing the cgroup", cmd.Args, d)
		cg.Kill()
		return <-done
	}
}

// procsIn returns the processes left in the cgroup (in any hierarchy).
func procsIn(t *testing.T, cg Cgroup) []int {
	var all []int
	for _, p := range cg.Paths() {
		pids, err := readPids(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			t.Errorf("read %s/cgroup.procs: %v", p, err)
		}
		for _, pid := range pids {
			if !slices.Contains(all, pid) {
				all = append(all, pid)
			}
		}
	}
	return all
}

// pidsDir returns the cgroup's directory that has pids.current.
func pidsDir(cg Cgroup) string {
	for _, p := range cg.Paths() {
		if exists(filepath.Join(p, "pids.current")) {
			return p
		}
	}
	return ""
}

func TestForkBomb(t *testing.T) {
	user := Limits{Pids: 20, MemoryBytes: 64 << 20}
	cg := newTestCgroup(t, "forkbomb", user)
	cmd := exec.Command("/bin/sh", "-c", `read x; for i in $(seq 200); do sleep 5 & done; wait`)
	stderr := outFile(t)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	start := time.Now()
	startIn(t, cg, cmd)
	err := waitTimeout(t, cg, cmd, 20*time.Second)
	t.Logf("sh: %v after %s; output: %q", err, time.Since(start).Round(time.Millisecond), strings.TrimSpace(fileText(stderr)))
	if !strings.Contains(strings.ToLower(fileText(stderr)), "fork") {
		t.Errorf("no fork failure reported by sh")
	}
	ev, err := cg.Events()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("events: %+v", ev)
	if ev.PidsMaxHits == 0 {
		t.Errorf("PidsMaxHits = 0")
	}
	msgs := ev.Messages(user)
	want := fmt.Sprintf("hutch: process limit 20 reached: %d %s refused", ev.PidsMaxHits, plural(ev.PidsMaxHits, "fork", "forks"))
	if !slices.Contains(msgs, want) {
		t.Errorf("Messages = %q, want %q", msgs, want)
	}
	t.Logf("message: %s", strings.Join(msgs, "; "))
	left := procsIn(t, cg)
	t.Logf("%d processes left before Kill", len(left))
	if err := cg.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if left := procsIn(t, cg); len(left) != 0 {
		t.Errorf("after Kill: processes %v still in the cgroup", left)
	}
}

func TestMemoryHog(t *testing.T) {
	user := Limits{MemoryBytes: 64 << 20, Pids: 64}
	cg := newTestCgroup(t, "memhog", user)
	cmd := helperCmd(t, "hog")
	out := outFile(t)
	cmd.Stdout, cmd.Stderr = out, out
	startIn(t, cg, cmd)
	err := waitTimeout(t, cg, cmd, 60*time.Second)
	t.Logf("hog: %v; output %q", err, strings.TrimSpace(fileText(out)))
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("hog was not killed by SIGKILL: %v", cmd.ProcessState)
	}
	ev, err := cg.Events()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("events: %+v", ev)
	if ev.OOMKills == 0 {
		t.Errorf("OOMKills = 0")
	}
	if ev.MemoryPeak != 0 && ev.MemoryPeak > uint64(user.MemoryBytes)+1<<20 {
		t.Errorf("MemoryPeak %d above the limit %d", ev.MemoryPeak, user.MemoryBytes)
	}
	msgs := ev.Messages(user)
	if len(msgs) == 0 || msgs[0] != "hutch: killed: memory limit 64MiB exceeded" {
		t.Errorf("Messages = %q", msgs)
	}
	t.Logf("message: %s", strings.Join(msgs, "; "))
}

func TestCPUThrottle(t *testing.T) {
	user := Limits{CPUs: 0.5, Pids: 64, MemoryBytes: 256 << 20}
	cg := newTestCgroup(t, "cpu", user)
	wall := 1500 * time.Millisecond
	cmd := helperCmd(t, "spin", "HUTCH_CGROUP_TEST_SPIN="+wall.String(), "GOMAXPROCS=2")
	start := time.Now()
	startIn(t, cg, cmd)
	if err := waitTimeout(t, cg, cmd, 30*time.Second); err != nil {
		t.Fatalf("spinner: %v", err)
	}
	elapsed := time.Since(start)
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	ev, err := cg.Events()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("2 spinning threads for %s under cpus=0.5: %s CPU time in %s; events %+v; %s",
		wall, cpu.Round(time.Millisecond), elapsed.Round(time.Millisecond), ev, ev.CPUNote(user))
	if ev.CPUThrottled == 0 {
		t.Errorf("CPUThrottled = 0")
	}
	if limit := time.Duration(float64(elapsed)*user.CPUs*1.5) + 300*time.Millisecond; cpu > limit {
		t.Errorf("CPU time %s is more than cpus=%g allows in %s (%s)", cpu, user.CPUs, elapsed, limit)
	}
}

func TestKillRemove(t *testing.T) {
	cg := newTestCgroup(t, "kill", Limits{Pids: 50})
	cmd := exec.Command("/bin/sh", "-c", `read x; sleep 100 & sleep 100 & (sleep 100 & wait) & wait`)
	startIn(t, cg, cmd)
	deadline := time.Now().Add(5 * time.Second)
	for len(procsIn(t, cg)) < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("before Kill: %v", procsIn(t, cg))
	if err := cg.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if left := procsIn(t, cg); len(left) != 0 {
		t.Errorf("after Kill: %v", left)
	}
	// sh, our child, is a zombie until we wait for it: Remove works anyway
	// (as for hutch's init, which the supervisor reaps after Remove).
	if err := cg.Remove(); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	cmd.Wait()
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("sh: %v, want killed", cmd.ProcessState)
	}
	for _, p := range cg.Paths() {
		if exists(p) {
			t.Errorf("%s exists after Remove", p)
		}
	}
	if err := cg.Remove(); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, err := cg.Events(); err != nil {
		t.Errorf("Events after Remove: %v", err)
	}
	if fd, ok := cg.FD(); ok {
		t.Errorf("FD after Remove: %d", fd)
	}
}

func TestReapStale(t *testing.T) {
	ctx := context.Background()
	// A pid that is surely dead: a process that just exited.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := dead.Process.Pid
	stale, err := newCgroup(ctx, "reapdead", Limits{Pids: 20}, Options{}, deadPid)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no cgroup can be used here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stale.Remove() })
	live := newTestCgroup(t, "reaplive", Limits{Pids: 20})

	// Something still running in the stale cgroup, as after a killed
	// supervisor.
	sleeper := exec.Command("/bin/sh", "-c", "read x; exec sleep 100")
	startIn(t, stale, sleeper)

	// A decoy next to them that looks like ours but is not.
	decoy := filepath.Join(filepath.Dir(live.Path()), fmt.Sprintf("hutch-%d-0-decoy.scope", deadPid))
	if err := os.Mkdir(decoy, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(decoy) })

	removed, err := ReapStale(ctx)
	t.Logf("ReapStale removed %q, err %v", removed, err)
	if err != nil {
		t.Errorf("ReapStale: %v", err)
	}
	for _, p := range stale.Paths() {
		if !slices.Contains(removed, p) {
			t.Errorf("%s not reported removed", p)
		}
		if exists(p) {
			t.Errorf("%s still exists", p)
		}
	}
	for _, p := range live.Paths() {
		if !exists(p) || slices.Contains(removed, p) {
			t.Errorf("%s of a live owner was removed", p)
		}
	}
	if !exists(decoy) {
		t.Errorf("decoy %s was removed", decoy)
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	select {
	case <-done:
		if ws := sleeper.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() {
			t.Errorf("sleeper: %v, want killed", sleeper.ProcessState)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the process in the stale cgroup was not killed")
	}
}

// TestThreadMargin measures how many tasks of pids.max an idle Go process
// like hutch's init takes.
func TestThreadMargin(t *testing.T) {
	cg := newTestCgroup(t, "threads", Limits{Pids: 1000, MemoryBytes: 256 << 20})
	dir := pidsDir(cg)
	if dir == "" {
		t.Skip("no pids.current")
	}
	cmd := helperCmd(t, "idle")
	out := outFile(t)
	cmd.Stdout = out
	startIn(t, cg, cmd)
	maxTasks := 0
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(10 * time.Millisecond):
			if s, err := readString(filepath.Join(dir, "pids.current")); err == nil {
				if n, _ := strconv.Atoi(s); n > maxTasks {
					maxTasks = n
				}
			}
		}
	}
	t.Logf("idle Go process (GOMAXPROCS %d, %d CPUs) waiting for a child: at most %d tasks in the cgroup including the child (pids.current); at its end %s",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), maxTasks, strings.TrimSpace(fileText(out)))
	if maxTasks < 2 {
		t.Errorf("pids.current never above %d", maxTasks)
	}
}

// TestUnavailableUnprivileged: where Probe finds no cgroup (here: an
// unprivileged user on the development machines), New must say why.
func TestUnavailableUnprivileged(t *testing.T) {
	if os.Getuid() == 0 {
		t.Skip("runs as an unprivileged user: TestUnprivileged runs it as nobody")
	}
	h := Probe()
	t.Logf("Probe as uid %d:\n%s", os.Getuid(), h)
	if h.Backend != BackendRlimit {
		if vmScenario() == "nodelegation" {
			t.Fatalf("the VM tier's nodelegation scenario delegates nothing, but Probe chose %s", h.Backend)
		}
		t.Skipf("uid %d can use %s here", os.Getuid(), h.Backend)
	}
	_, err := New(context.Background(), "", Limits{MemoryBytes: 64 << 20, Pids: 20}, Options{})
	t.Logf("New: %v", err)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("New: %v, want ErrUnavailable", err)
	}
	msg := err.Error()
	for _, want := range []string{fmt.Sprintf("uid %d", os.Getuid()), "not root", "Delegate=yes"} {
		if !strings.Contains(msg, want) {
			t.Errorf("reason lacks %q: %s", want, msg)
		}
	}
}

// TestUnprivileged runs TestUnavailableUnprivileged as nobody when the
// tests run as root.
func TestUnprivileged(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("not root")
	}
	dir, err := os.MkdirTemp("", "hutch-cgroup-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "cgroup.test")
	src, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestUnavailableUnprivileged$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: true}}
	out, err := cmd.CombinedOutput()
	t.Logf("as nobody:\n%s", out)
	if err != nil {
		t.Fatalf("as nobody: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestUnavailableUnprivileged") {
		t.Logf("TestUnavailableUnprivileged did not run to a pass as nobody (skipped: nobody can use a cgroup here)")
	}
}
