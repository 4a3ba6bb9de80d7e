package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestV2MoveSelf covers the cgroup v2 case where hutch is alone in its own
// cgroup, as when started with `systemd-run --user --scope -p Delegate=yes`:
// New moves hutch into a leaf (the no-internal-process rule), enables the
// controllers and creates the sandbox cgroup next to that leaf; a second
// New in the same process does not move it again; ReapStale run later from
// there removes the leaf of the dead supervisor.
//
// The test makes such a cgroup (hutchtest-PID.scope) where Probe would put
// sandbox cgroups and starts a copy of itself in it (helper "newself"). It
// needs a cgroup v2 host with a usable subtree: the VM tier (uid 1000 in a
// delegated user@1000.service), or root on a v2 host.
func TestV2MoveSelf(t *testing.T) {
	if !exists("/sys/fs/cgroup/cgroup.controllers") {
		t.Skip("not a cgroup v2 host (no /sys/fs/cgroup/cgroup.controllers); the VM tier runs this test: see docs/RESOURCES.md")
	}
	h := Probe()
	if h.v2plan == nil {
		if vmScenario() == "delegated" {
			t.Fatalf("the VM tier's delegated scenario has a delegated cgroup v2 subtree, but Probe: %s", h.Reason)
		}
		t.Skipf("no usable cgroup v2 subtree: %s", h.Reason)
	}
	if h.v2plan.moveSelf {
		t.Skip("this test process is alone in its cgroup: the other tests cover moving")
	}
	scope := filepath.Join(h.v2plan.base, fmt.Sprintf("hutchtest-%d.scope", os.Getpid()))
	if err := os.Mkdir(scope, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTestTree(t, scope) })

	// 1. A hutch alone in scope: New moves it.
	out, err := runIn(t, scope, "newself")
	t.Logf("newself in %s:\n%s", scope, out)
	if err != nil || !strings.Contains(out, "NEWSELF OK") {
		t.Fatalf("newself: %v", err)
	}
	var supervisor string
	entries, _ := os.ReadDir(scope)
	for _, e := range entries {
		if _, _, name, ok := parseLeafName(e.Name()); ok && name == supervisorName {
			supervisor = filepath.Join(scope, e.Name())
		}
	}
	if supervisor == "" {
		t.Fatalf("no supervisor leaf left in %s (%v)", scope, entries)
	}
	if got := readFields(filepath.Join(scope, "cgroup.subtree_control")); !slices.Contains(got, "memory") || !slices.Contains(got, "pids") {
		t.Errorf("%s/cgroup.subtree_control = %v", scope, got)
	}

	// 2. Its supervisor leaf outlives it; a later hutch in the same place
	// reaps it. (scope has controllers enabled now, so the later hutch
	// runs in a leaf of it.)
	reaper := filepath.Join(scope, "reaper")
	if err := os.Mkdir(reaper, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err = runIn(t, reaper, "reap")
	t.Logf("reap:\n%s", out)
	if err != nil {
		t.Fatalf("reap: %v", err)
	}
	if !strings.Contains(out, "REMOVED "+supervisor+"\n") || exists(supervisor) {
		t.Errorf("the dead supervisor's leaf %s was not reaped", supervisor)
	}
}

// runIn runs this test binary in helper mode inside the cgroup dir.
func runIn(t *testing.T, dir, mode string) (string, error) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// removeTestTree kills everything below dir and removes it, deepest first.
func removeTestTree(t *testing.T, dir string) {
	ctx := context.Background()
	for _, d := range append(subdirs(dir), dir) {
		writeString(filepath.Join(d, "cgroup.kill"), "1")
		killProcs(ctx, func() []string { return []string{filepath.Join(d, "cgroup.procs")} }, filepath.Base(d), killTimeout)
		if err := rmdirRetry(ctx, d, nil); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
}

// newSelfMain is the "newself" helper: a hutch alone in its cgroup.
func newSelfMain() error {
	ctx := context.Background()
	h := Probe()
	fmt.Printf("probe:\n%s\n", h)
	if !h.MovesSelf {
		return fmt.Errorf("Probe: MovesSelf is false")
	}
	l := Limits{MemoryBytes: 64 << 20, Pids: 20}
	if slices.Contains(h.Controllers, "cpu") {
		l.CPUs = 0.5
	}
	cg, err := New(ctx, "inner", l, Options{})
	if err != nil {
		return err
	}
	defer cg.Remove()
	self, _ := os.ReadFile("/proc/self/cgroup")
	fmt.Printf("sandbox %s (%s); hutch now in %s", cg.Path(), cg.Backend(), self)
	if !strings.Contains(string(self), "-"+supervisorName) {
		return fmt.Errorf("hutch did not move into a supervisor leaf")
	}
	fd, ok := cg.FD()
	if !ok {
		return fmt.Errorf("no FD on cgroup v2")
	}
	cmd := exec.Command("/bin/sh", "-c", "cat /proc/self/cgroup")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("sh in the sandbox cgroup: %v", err)
	}
	fmt.Printf("a command started with CLONE_INTO_CGROUP is in %s", out)
	if !strings.Contains(string(out), filepath.Base(cg.Path())) {
		return fmt.Errorf("the command is not in the sandbox cgroup")
	}
	want := map[string]string{"memory.max": "67108864", "memory.swap.max": "0", "pids.max": "20"}
	if l.CPUs > 0 {
		want["cpu.max"] = "50000 100000"
	}
	for _, f := range []string{"memory.max", "memory.swap.max", "pids.max", "cpu.max"} {
		v, err := readString(filepath.Join(cg.Path(), f))
		fmt.Printf("%s = %s %v\n", f, v, err)
		if w, ok := want[f]; ok && v != w && !(f == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("%s is %q, want %q", f, v, w)
		}
	}
	cg2, err := New(ctx, "inner2", Limits{Pids: 10}, Options{})
	if err != nil {
		return fmt.Errorf("second New: %v", err)
	}
	defer cg2.Remove()
	if filepath.Dir(cg2.Path()) != filepath.Dir(cg.Path()) {
		return fmt.Errorf("second sandbox in %s, first in %s", cg2.Path(), cg.Path())
	}
	if err := cg.Remove(); err != nil {
		return err
	}
	return cg2.Remove()
}
