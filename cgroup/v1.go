package cgroup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// v1cgroup is a sandbox cgroup on cgroup v1: a directory named
// hutch-PID-START-NAME in each of the memory, pids and cpu hierarchies.
type v1cgroup struct {
	backend string
	leaf    string
	hiers   []v1hier
	dirs    []string // one per hierarchy, memory first
	cg      cgroup1.Cgroup

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
	// Create the directories here, not with MkdirAll in cgroup1.New, so
	// that an existing cgroup is never taken over and Remove removes only
	// what was made.
	for _, x := range hiers {
		d := filepath.Join(x.base, leaf)
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: create %s: %w", d, err)
		}
		c.dirs = append(c.dirs, d)
	}
	var subsystems []cgroup1.Subsystem
	paths := map[cgroup1.Name]string{}
	for _, x := range hiers {
		var s cgroup1.Subsystem
		switch x.ctrl {
		case "memory":
			s = cgroup1.NewMemory(x.libRoot, cgroup1.OptionalSwap())
		case "pids":
			s = cgroup1.NewPids(x.libRoot)
		case "cpu":
			s = cgroup1.NewCpu(x.libRoot)
		}
		subsystems = append(subsystems, s)
		paths[s.Name()] = "/" + strings.TrimPrefix(rel(x.mount, filepath.Join(x.base, leaf)), "/")
	}
	res := &specs.LinuxResources{}
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		res.Memory = &specs.LinuxMemory{Limit: &m}
		for _, x := range hiers {
			// memsw (memory+swap) equal to the memory limit: no swap.
			if x.ctrl == "memory" && exists(filepath.Join(x.base, leaf, "memory.memsw.limit_in_bytes")) {
				sw := m
				res.Memory.Swap = &sw
			}
		}
	}
	if l.Pids > 0 {
		p := l.Pids
		res.Pids = &specs.LinuxPids{Limit: &p}
	}
	if l.CPUs > 0 {
		q := cpuQuota(l.CPUs)
		per := uint64(cpuPeriod)
		res.CPU = &specs.LinuxCPU{Quota: &q, Period: &per}
	}
	path := func(n cgroup1.Name) (string, error) {
		if p, ok := paths[n]; ok {
			return p, nil
		}
		return "", cgroup1.ErrControllerNotActive
	}
	cg, err := cgroup1.New(path, res,
		cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subsystems, nil }))
	if err != nil {
		return nil, fmt.Errorf("cgroup: set limits %+v in %s: %w", l, strings.Join(c.dirs, ", "), err)
	}
	c.cg = cg
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
	if err := c.cg.Add(cgroup1.Process{Pid: pid}); err != nil {
		return fmt.Errorf("cgroup: add pid %d to %s: %w", pid, strings.Join(c.dirs, ", "), err)
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
	st, err := c.cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return e, fmt.Errorf("cgroup: read statistics of %s: %w", strings.Join(c.dirs, ", "), err)
	}
	if st.MemoryOomControl != nil {
		e.OOMKills = st.MemoryOomControl.OomKill
	}
	if st.Memory != nil && st.Memory.Usage != nil {
		e.MemoryPeak = st.Memory.Usage.Max
	}
	if st.CPU != nil && st.CPU.Throttling != nil {
		e.CPUThrottled = st.CPU.Throttling.ThrottledPeriods
		e.CPUThrottledUsec = st.CPU.Throttling.ThrottledTime / 1000
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
	if c.cg != nil {
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
