package cgroup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"strconv"
)

// v1cgroup is a sandbox cgroup on cgroup v1: a directory named
// hutch-PID-START-NAME in each of the memory, pids and cpu hierarchies.
type v1cgroup struct {
	backend string
	leaf    string
	hiers   []v1hier
	dirs    []string // one per hierarchy, memory first

	mu      sync.Mutex
	removed bool
	final   Events
}

func newV1(ctx context.Context, h Host, leaf string, l Limits) (Cgroup, error) {
	hiers := h.v1plan
	var names []string
	for _, x := range hiers {
		names = append(names, x.ctrl)
	}
	if l.CPUs > 0 && !slices.Contains(names, "cpu") {
		return nil, fmt.Errorf("%w: cpu: no usable cgroup v1 cpu hierarchy, so a cpus limit cannot be enforced; run without a cpus limit", ErrControllerMissing)
	}
	c := &v1cgroup{backend: h.Backend, leaf: leaf, hiers: hiers}
	ok := false
	defer func() {
		if !ok {
			c.Remove()
		}
	}()
	// Create the directories one level deep, never with MkdirAll, so that
	// an existing cgroup is never taken over and Remove removes only what
	// was made.
	for _, x := range hiers {
		d := filepath.Join(x.base, leaf)
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: create %s: %w", d, err)
		}
		c.dirs = append(c.dirs, d)
	}
	for i, x := range hiers {
		d := c.dirs[i]
		var err error
		switch x.ctrl {
		case "memory":
			if l.MemoryBytes > 0 {
				m := strconv.FormatInt(l.MemoryBytes, 10)
				err = writeLimit(d, "memory.limit_in_bytes", m)
				// memsw (memory+swap) equal to the memory limit: no swap.
				// Absent when the kernel does not account swap.
				if err == nil && exists(filepath.Join(d, "memory.memsw.limit_in_bytes")) {
					err = writeLimit(d, "memory.memsw.limit_in_bytes", m)
				}
			}
		case "pids":
			if l.Pids > 0 {
				err = writeLimit(d, "pids.max", strconv.FormatInt(l.Pids, 10))
			}
		case "cpu":
			if l.CPUs > 0 {
				// The period first: the quota is checked against it.
				err = writeLimit(d, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod))
				if err == nil {
					err = writeLimit(d, "cpu.cfs_quota_us", strconv.FormatInt(cpuQuota(l.CPUs), 10))
				}
			}
		}
		if err != nil {
			return nil, err
		}
	}
	ok = true
	return c, nil
}

func (c *v1cgroup) Backend() string { return c.backend }
func (c *v1cgroup) Path() string    { return c.dirs[0] }
func (c *v1cgroup) Paths() []string { return slices.Clone(c.dirs) }
func (c *v1cgroup) FD() (int, bool) { return -1, false }

func (c *v1cgroup) dir(ctrl string) string {
	for i, x := range c.hiers {
		if x.ctrl == ctrl && i < len(c.dirs) {
			return c.dirs[i]
		}
	}
	return ""
}

func (c *v1cgroup) AddProc(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup: invalid pid %d", pid)
	}
	for _, d := range c.dirs {
		if err := writeString(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroup: add pid %d to %s: %w", pid, d, err)
		}
	}
	return nil
}

func (c *v1cgroup) Events() (Events, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return c.final, nil
	}
	return c.read()
}

func (c *v1cgroup) read() (Events, error) {
	var e Events
	if d := c.dir("memory"); d != "" {
		// oom_kill in memory.oom_control: Linux 4.13 and later.
		oc, err := readKV(filepath.Join(d, "memory.oom_control"))
		if err != nil {
			return e, fmt.Errorf("cgroup: read statistics of %s: %w", d, err)
		}
		e.OOMKills = oc["oom_kill"]
		if v, err := readUint(filepath.Join(d, "memory.max_usage_in_bytes")); err == nil {
			e.MemoryPeak = v
		}
	}
	if d := c.dir("cpu"); d != "" {
		if st, err := readKV(filepath.Join(d, "cpu.stat")); err == nil {
			e.CPUThrottled = st["nr_throttled"]
			e.CPUThrottledUsec = st["throttled_time"] / 1000 // ns
		}
	}
	if d := c.dir("pids"); d != "" {
		if kv, err := readKV(filepath.Join(d, "pids.events")); err == nil {
			e.PidsMaxHits = kv["max"]
		}
	}
	return e, nil
}

func (c *v1cgroup) Kill() error {
	return c.kill(context.Background())
}

func (c *v1cgroup) kill(ctx context.Context) error {
	procs := func() []string {
		var files []string
		for _, d := range c.dirs {
			files = append(files, filepath.Join(d, "cgroup.procs"))
			for _, s := range subdirs(d) {
				files = append(files, filepath.Join(s, "cgroup.procs"))
			}
		}
		return files
	}
	return killProcs(ctx, procs, c.leaf, killTimeout)
}

func (c *v1cgroup) Remove() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return nil
	}
	if len(c.dirs) == len(c.hiers) {
		if e, err := c.read(); err == nil {
			c.final = e
		}
	}
	if err := removeTrees(context.Background(), c.dirs, c.kill); err != nil {
		return err
	}
	c.removed = true
	return nil
}
