package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// v2cgroup is a sandbox cgroup on the cgroup v2 hierarchy: one leaf
// directory, base/hutch-PID-START-NAME, and containerd's manager of it.
type v2cgroup struct {
	backend string
	dir     string
	leaf    string
	mgr     *cgroup2.Manager

	mu      sync.Mutex
	fd      int // O_PATH of dir; -1 once closed
	removed bool
	final   Events
}

func newV2(ctx context.Context, h Host, leaf string, l Limits) (Cgroup, error) {
	plan := h.v2plan
	if l.CPUs > 0 && !slices.Contains(plan.ctrls, "cpu") {
		return nil, fmt.Errorf("%w: cpu: %s has no cpu controller for its children (it has %s), so a cpus limit cannot be enforced; "+
			"delegate cpu too (systemd: Delegate=yes or Delegate=memory pids cpu), or run without a cpus limit",
			ErrControllerMissing, plan.base, strings.Join(plan.ctrls, " "))
	}
	if plan.moveSelf {
		if err := moveSelf(plan); err != nil {
			return nil, err
		}
	}
	// Created here with one Mkdir, not by cgroup2.NewManager: that makes
	// the directory with MkdirAll (an existing cgroup would be taken over,
	// and Remove would remove what hutch did not make) and enables the
	// controllers in every ancestor up to the mount, where hutch enables
	// them only in its own cgroup (moveSelf).
	dir := filepath.Join(plan.base, leaf)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: create %s: %w", dir, err)
	}
	c := &v2cgroup{backend: h.Backend, dir: dir, leaf: leaf, fd: -1}
	ok := false
	defer func() {
		if !ok {
			c.Remove()
		}
	}()
	mgr, err := v2manager(plan.mount, dir)
	if err != nil {
		return nil, err
	}
	c.mgr = mgr
	res := v2resources(l, slices.Contains(plan.ctrls, "memory") && exists(filepath.Join(dir, "memory.swap.max")))
	if err := mgr.Update(res); err != nil {
		return nil, fmt.Errorf("cgroup: set limits %+v in %s: %w", l, dir, err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup: open %s: %w", dir, err)
	}
	c.fd = fd
	ok = true
	return c, nil
}

// v2manager returns containerd's manager of dir, a cgroup below mount.
func v2manager(mount, dir string) (*cgroup2.Manager, error) {
	m, err := cgroup2.Load(rel(mount, dir), cgroup2.WithMountpoint(mount))
	if err != nil {
		return nil, fmt.Errorf("cgroup: load %s: %w", dir, err)
	}
	return m, nil
}

// v2resources are the limits l as containerd's cgroup v2 resources: memory.max,
// pids.max, cpu.max, and memory.swap.max 0 when noSwap (the file is missing
// when the kernel does not account swap: CONFIG_MEMCG_SWAP off, or
// swapaccount=0; then there is nothing to cap).
func v2resources(l Limits, noSwap bool) *cgroup2.Resources {
	res := &cgroup2.Resources{}
	if l.MemoryBytes > 0 || noSwap {
		res.Memory = &cgroup2.Memory{}
	}
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		res.Memory.Max = &m
	}
	if noSwap {
		zero := int64(0)
		res.Memory.Swap = &zero
	}
	if l.Pids > 0 {
		res.Pids = &cgroup2.Pids{Max: l.Pids}
	}
	if l.CPUs > 0 {
		q, p := cpuQuota(l.CPUs), uint64(cpuPeriod)
		res.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&q, &p)}
	}
	return res
}

// moveSelf moves this process (all its threads) and its children into the
// leaf hutch-PID-START-supervisor of its own cgroup, then enables the
// controllers for the cgroup's children: a cgroup v2 cgroup other than the
// root may hold processes or have controllers enabled for children, not
// both (the no-internal-process rule).
func moveSelf(plan *v2plan) error {
	self := os.Getpid()
	sup := filepath.Join(plan.base, leafName(self, startTime(self), supervisorName))
	if err := os.Mkdir(sup, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cgroup: create %s: %w", sup, err)
	}
	// containerd's managers of base and of the leaf, with base as their
	// mountpoint: ToggleControllers writes cgroup.subtree_control in every
	// directory from the mountpoint down to the manager's parent, so the
	// leaf's manager writes base's alone (hutch enables controllers only
	// in its own cgroup, never in an ancestor).
	baseMgr, err1 := v2manager(plan.base, plan.base)
	supMgr, err2 := v2manager(plan.base, sup)
	if err := errors.Join(err1, err2); err != nil {
		unix.Rmdir(sup)
		return err
	}
	pids, err := readPids(filepath.Join(plan.base, "cgroup.procs"))
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	if foreign := foreignPids(pids); len(foreign) > 0 {
		unix.Rmdir(sup)
		return fmt.Errorf("cgroup: %s now holds processes hutch did not start (%v); cannot enable controllers", plan.base, foreign)
	}
	moved := []int{}
	undo := func() {
		for _, p := range moved {
			baseMgr.AddProc(uint64(p))
		}
		unix.Rmdir(sup)
	}
	// Children first, then this process, so nothing of ours stays behind.
	slices.SortFunc(pids, func(a, b int) int {
		if a == self {
			return 1
		}
		if b == self {
			return -1
		}
		return a - b
	})
	for _, p := range pids {
		if err := supMgr.AddProc(uint64(p)); err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue
			}
			undo()
			return fmt.Errorf("cgroup: move pid %d into %s: %w", p, sup, err)
		}
		moved = append(moved, p)
	}
	// One controller at a time: only the required ones must be enabled.
	var enabled []string
	for _, c := range plan.ctrls {
		err := supMgr.ToggleControllers([]string{c}, cgroup2.Enable)
		if err == nil {
			enabled = append(enabled, c)
			continue
		}
		if slices.Contains(required, c) {
			if len(enabled) > 0 {
				supMgr.ToggleControllers(enabled, cgroup2.Disable)
			}
			undo()
			return fmt.Errorf("cgroup: enable %s in %s: %w", c, filepath.Join(plan.base, "cgroup.subtree_control"), err)
		}
	}
	plan.ctrls = enabled
	return nil
}

func (c *v2cgroup) Backend() string      { return c.backend }
func (c *v2cgroup) Path() string         { return c.dir }
func (c *v2cgroup) Paths() []string      { return []string{c.dir} }
func (c *v2cgroup) file(n string) string { return filepath.Join(c.dir, n) }

func (c *v2cgroup) FD() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fd, c.fd >= 0
}

func (c *v2cgroup) AddProc(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup: invalid pid %d", pid)
	}
	if err := c.mgr.AddProc(uint64(pid)); err != nil {
		return fmt.Errorf("cgroup: add pid %d to %s: %w", pid, c.dir, err)
	}
	return nil
}

func (c *v2cgroup) Events() (Events, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return c.final, nil
	}
	return c.read()
}

// read reads memory.events and cpu.stat through containerd's manager, and
// memory.peak (Linux 5.19 and later) and pids.events itself: the
// manager's memory statistics (StatMemory) would read memory.stat and
// seven more files for memory.peak alone, and it has no pids.events.
func (c *v2cgroup) read() (Events, error) {
	var e Events
	st, err := c.mgr.StatFiltered(cgroup2.StatMemoryEvents | cgroup2.StatCPU)
	if err != nil {
		return e, fmt.Errorf("cgroup: read statistics of %s: %w", c.dir, err)
	}
	if st.MemoryEvents != nil {
		e.OOMKills = st.MemoryEvents.OomKill
	}
	if st.CPU != nil {
		e.CPUThrottled = st.CPU.NrThrottled
		e.CPUThrottledUsec = st.CPU.ThrottledUsec
	}
	if v, err := readString(c.file("memory.peak")); err == nil {
		e.MemoryPeak, _ = strconv.ParseUint(v, 10, 64)
	}
	if kv, err := readKV(c.file("pids.events")); err == nil {
		e.PidsMaxHits = kv["max"]
	}
	return e, nil
}

func (c *v2cgroup) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return nil
	}
	return c.kill(context.Background())
}

// kill kills everything in the cgroup; c.mu is held.
func (c *v2cgroup) kill(ctx context.Context) error {
	procs := func() []string {
		files := []string{c.file("cgroup.procs")}
		for _, d := range subdirs(c.dir) {
			files = append(files, filepath.Join(d, "cgroup.procs"))
		}
		return files
	}
	if !exists(c.dir) {
		return nil
	}
	// The manager's Kill writes cgroup.kill (5.14+), which kills the whole
	// subtree at once, forks in flight included; the loop below then only
	// waits for it to be empty. Without cgroup.kill its Kill would freeze
	// the cgroup, signal each process by pid and wait for it, reaping the
	// caller's children (the caller reaps its own init) and logging through
	// logrus, so hutch's pidfd loop does the killing there.
	if c.mgr != nil && exists(c.file("cgroup.kill")) {
		if err := c.mgr.Kill(); err == nil {
			waitEmpty(ctx, c.file("cgroup.events"), time.Second)
		}
	}
	return killProcs(ctx, procs, c.leaf, killTimeout)
}

// waitEmpty waits until cgroup.events says populated 0, up to timeout.
func waitEmpty(ctx context.Context, events string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		kv, err := readKV(events)
		if err != nil || kv["populated"] == 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (c *v2cgroup) Remove() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return nil
	}
	if c.mgr != nil && exists(c.dir) {
		if e, err := c.read(); err == nil {
			c.final = e
		}
	}
	// Removed by hutch's rmdir, not the manager's Delete: see removeTrees.
	if err := removeTrees(context.Background(), []string{c.dir}, c.kill); err != nil {
		return err
	}
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	c.removed = true
	return nil
}
