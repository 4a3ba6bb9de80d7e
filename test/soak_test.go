package test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The reliability soak, bounded for CI: many runs and many execs into one
// session leave nothing growing — descriptors and memory of the session's
// server, processes, mounts, hutch's files in /tmp, the workspace, cgroups.
// HUTCH_SOAK=N runs N of each (default 500).
func TestSoak(t *testing.T) {
	n := 500
	if v, err := strconv.Atoi(os.Getenv("HUTCH_SOAK")); err == nil && v > 0 {
		n = v
	}
	ws := userDir(t)
	writeUserFile(t, filepath.Join(ws, "in.txt"), "hello\n")
	name := startSession(t, ws)
	server := sessionPid(t, ws, name)
	exec := func() {
		r := hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", "cat in.txt >/dev/null; echo x > /tmp/out; ls /workspace >/dev/null")
		mustCode(t, r, 0)
	}
	// Warm: the spawner, its reaper made ahead, the server's buffers.
	for range 20 {
		exec()
	}
	before := snapshot(t, server, ws)
	for range n {
		exec()
	}
	for range n {
		r := hutch(t, opts{dir: ws}, "run", "--no-discover", "--", "/bin/sh", "-c", "cat in.txt >/dev/null; echo x > /tmp/out")
		mustCode(t, r, 0)
	}
	after := snapshot(t, server, ws)
	if after.fds > before.fds {
		t.Errorf("the session server's descriptors grew from %d to %d over %d execs", before.fds, after.fds, n)
	}
	if after.rssKiB > before.rssKiB+8<<10 {
		t.Errorf("the session server's RSS grew from %d to %d KiB over %d execs", before.rssKiB, after.rssKiB, n)
	}
	if after.procs > before.procs {
		t.Errorf("the test user's processes went from %d to %d:\n%s", before.procs, after.procs, after.procList)
	}
	if after.mounts != before.mounts {
		t.Errorf("the host's mount table went from %d to %d entries", before.mounts, after.mounts)
	}
	// Only what appeared counts: other suites on the machine remove theirs.
	var appeared []string
	for _, n := range strings.Fields(after.tmpList) {
		// hutch-e2e-*: a test suite's own directories (this one's were
		// there before; another suite's may appear), not hutch's.
		if !slices.Contains(strings.Fields(before.tmpList), n) && !strings.HasPrefix(n, "hutch-e2e-") {
			appeared = append(appeared, n)
		}
	}
	if len(appeared) > 0 {
		t.Errorf("hutch's files in /tmp appeared over %d execs and runs: %v", n, appeared)
	}
	if after.workspace != before.workspace {
		t.Errorf("the workspace went from %v to %v", before.wsList, after.wsList)
	}
	if len(after.cgroups) > len(before.cgroups) {
		t.Errorf("cgroups went from %v to %v", before.cgroups, after.cgroups)
	}
}

type soakState struct {
	fds, rssKiB, procs, mounts, tmp, workspace int
	procList, tmpList, wsList                  string
	cgroups                                    []string
}

func snapshot(t *testing.T, server int, ws string) soakState {
	t.Helper()
	var s soakState
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", server))
	s.fds = len(fds)
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", server))
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			s.rssKiB, _ = strconv.Atoi(f[1])
		}
	}
	ents, _ := os.ReadDir("/proc")
	var procs []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) != nil || int(st.Uid) != testUID {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		procs = append(procs, fmt.Sprintf("%d %s", pid, strings.TrimSpace(string(comm))))
	}
	s.procs, s.procList = len(procs), strings.Join(procs, "\n")
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	s.mounts = strings.Count(string(mi), "\n")
	tmp, _ := os.ReadDir(os.TempDir())
	var tl []string
	for _, e := range tmp {
		if fi, err := e.Info(); err == nil && strings.Contains(e.Name(), "hutch") {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == testUID {
				tl = append(tl, e.Name())
			}
		}
	}
	s.tmp, s.tmpList = len(tl), strings.Join(tl, " ")
	w, _ := os.ReadDir(ws)
	var wl []string
	for _, e := range w {
		wl = append(wl, e.Name())
	}
	s.workspace, s.wsList = len(wl), strings.Join(wl, " ")
	s.cgroups = cgroupDirs()
	return s
}
