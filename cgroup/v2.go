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

	"golang.org/x/sys/unix"
)

// v2cgroup is a sandbox cgroup on the cgroup v2 hierarchy: one leaf
// directory, base/hutch-PID-START-NAME.
type v2cgroup struct {
	backend string
	dir     string
	leaf    string

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
	if l.MemoryBytes > 0 {
		if err := writeLimit(dir, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return nil, err
		}
	}
	if l.Pids > 0 {
		if err := writeLimit(dir, "pids.max", strconv.FormatInt(l.Pids, 10)); err != nil {
			return nil, err
		}
	}
	if l.CPUs > 0 {
		if err := writeLimit(dir, "cpu.max", fmt.Sprintf("%d %d", cpuQuota(l.CPUs), cpuPeriod)); err != nil {
			return nil, err
		}
	}
	// No swap. The file is missing when the kernel does not account swap
	// (CONFIG_MEMCG_SWAP off, or swapaccount=0): then there is nothing to cap.
	if slices.Contains(plan.ctrls, "memory") {
		if err := writeString(filepath.Join(dir, "memory.swap.max"), "0"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cgroup: set memory.swap.max in %s: %w", dir, err)
		}
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup: open %s: %w", dir, err)
	}
	c.fd = fd
	ok = true
	return c, nil
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
			writeString(filepath.Join(plan.base, "cgroup.procs"), strconv.Itoa(p))
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
		if err := writeString(filepath.Join(sup, "cgroup.procs"), strconv.Itoa(p)); err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue
			}
			undo()
			return fmt.Errorf("cgroup: move pid %d into %s: %w", p, sup, err)
		}
		moved = append(moved, p)
	}
	ctl := filepath.Join(plan.base, "cgroup.subtree_control")
	var enabled []string
	for _, c := range plan.ctrls {
		err := writeString(ctl, "+"+c)
		if err == nil {
			enabled = append(enabled, c)
			continue
		}
		if slices.Contains(required, c) {
			for _, e := range enabled {
				writeString(ctl, "-"+e)
			}
			undo()
			return fmt.Errorf("cgroup: enable %s in %s: %w", c, ctl, err)
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
	if err := writeString(c.file("cgroup.procs"), strconv.Itoa(pid)); err != nil {
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

func (c *v2cgroup) read() (Events, error) {
	var e Events
	ev, err := readKV(c.file("memory.events"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return e, fmt.Errorf("cgroup: read statistics of %s: %w", c.dir, err)
	}
	e.OOMKills = ev["oom_kill"]
	if st, err := readKV(c.file("cpu.stat")); err == nil {
		e.CPUThrottled = st["nr_throttled"]
		e.CPUThrottledUsec = st["throttled_usec"]
	}
	// memory.peak: Linux 5.19 and later.
	if v, err := readUint(c.file("memory.peak")); err == nil {
		e.MemoryPeak = v
	}
	if kv, err := readKV(c.file("pids.events")); err == nil {
		e.PidsMaxHits = kv["max"]
	}
	return e, nil
}

func (c *v2cgroup) Kill() error {
	return c.kill(context.Background())
}

func (c *v2cgroup) kill(ctx context.Context) error {
	procs := func() []string {
		files := []string{c.file("cgroup.procs")}
		for _, d := range subdirs(c.dir) {
			files = append(files, filepath.Join(d, "cgroup.procs"))
		}
		return files
	}
	// cgroup.kill (5.14+) kills the whole subtree at once, forks in flight
	// included; the loop below then only waits for it to be empty.
	if err := writeString(c.file("cgroup.kill"), "1"); err == nil {
		waitEmpty(ctx, c.file("cgroup.events"), time.Second)
	} else if errors.Is(err, os.ErrNotExist) && !exists(c.dir) {
		return nil
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
	if exists(c.dir) {
		if e, err := c.read(); err == nil {
			c.final = e
		}
	}
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
