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

	"github.com/containerd/cgroups/v3/cgroup1"
	v1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// v1cgroup is a sandbox cgroup on cgroup v1: a directory named
// hutch-PID-START-NAME in each of the memory, pids and cpu hierarchies, and
// containerd's cgroup1.Cgroup of them.
type v1cgroup struct {
	backend string
	leaf    string
	hiers   []v1hier
	dirs    []string       // one per hierarchy, memory first
	cg      cgroup1.Cgroup // nil until the limits are set
	// stats are containerd's memory and cpu controllers of cg, and path
	// where they find the sandbox cgroup: what read asks for statistics.
	stats []v1stater
	path  cgroup1.Path

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
	// Create the directories one level deep, never with MkdirAll (which
	// cgroup1.New uses, and which then finds them made), so that an
	// existing cgroup is never taken over and Remove removes only what was
	// made.
	for _, x := range hiers {
		d := filepath.Join(x.base, leaf)
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: create %s: %w", d, err)
		}
		c.dirs = append(c.dirs, d)
	}
	// memsw (memory+swap) equal to the memory limit: no swap. Absent when
	// the kernel does not account swap.
	memsw := exists(filepath.Join(c.dirs[0], "memory.memsw.limit_in_bytes"))
	subsystems, path := v1subsystems(hiers, c.dirs)
	cg, err := cgroup1.New(path, v1resources(l, memsw), cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subsystems, nil }))
	if err != nil {
		return nil, fmt.Errorf("cgroup: set limits %+v in %s: %w", l, strings.Join(c.dirs, ", "), err)
	}
	c.cg, c.path = cg, path
	for _, sub := range subsystems {
		if st, ok := sub.(v1stater); ok && sub.Name() != cgroup1.Pids {
			c.stats = append(c.stats, st)
		}
	}
	ok = true
	return c, nil
}

// v1stater is a containerd cgroup v1 controller that reads statistics.
type v1stater interface {
	cgroup1.Subsystem
	Stat(path string, stats *v1stats.Metrics) error
}

// v1subsystems returns containerd's controllers of the hierarchies, and
// the sandbox cgroup's directory (dirs, one per hierarchy) in each as
// containerd spells it. containerd's controller NAME with root ROOT
// manages ROOT/NAME/PATH, while a hierarchy may be mounted under any name
// (/sys/fs/cgroup/cpu,cpuacct): ROOT is the mount's parent and PATH starts
// with ../MOUNTNAME, which filepath.Join resolves lexically, never through
// a symlink.
func v1subsystems(hiers []v1hier, dirs []string) ([]cgroup1.Subsystem, cgroup1.Path) {
	var subsystems []cgroup1.Subsystem
	paths := map[cgroup1.Name]string{}
	for i, x := range hiers {
		root := filepath.Dir(x.mount)
		var s cgroup1.Subsystem
		switch x.ctrl {
		case "memory":
			// Its statistics read memory.stat and memory.oom_control, and
			// four counters per module (memory.*, memsw, kmem, kmem.tcp);
			// only max_usage_in_bytes is used, which read reads itself.
			s = cgroup1.NewMemory(root, cgroup1.IgnoreModules("", "memsw", "kmem", "kmem.tcp"))
		case "pids":
			s = cgroup1.NewPids(root)
		case "cpu":
			s = cgroup1.NewCpu(root)
		default:
			continue
		}
		subsystems = append(subsystems, s)
		paths[s.Name()] = filepath.Join("..", filepath.Base(x.mount), rel(x.mount, dirs[i]))
	}
	return subsystems, func(n cgroup1.Name) (string, error) {
		if p, ok := paths[n]; ok {
			return p, nil
		}
		return "", cgroup1.ErrControllerNotActive
	}
}

// v1resources are the limits l as containerd's (the OCI runtime spec's)
// resources: memory.limit_in_bytes, with memsw the same memory.memsw
// limit_in_bytes, pids.max, and cpu.cfs_period_us then cpu.cfs_quota_us
// (the quota is checked against the period).
func v1resources(l Limits, memsw bool) *specs.LinuxResources {
	res := &specs.LinuxResources{}
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		res.Memory = &specs.LinuxMemory{Limit: &m}
		if memsw {
			sw := m
			res.Memory.Swap = &sw
		}
	}
	if l.Pids > 0 {
		p := l.Pids
		res.Pids = &specs.LinuxPids{Limit: &p}
	}
	if l.CPUs > 0 {
		q, per := cpuQuota(l.CPUs), uint64(cpuPeriod)
		res.CPU = &specs.LinuxCPU{Quota: &q, Period: &per}
	}
	return res
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
	if err := c.cg.AddProc(uint64(pid)); err != nil {
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

// read reads the statistics through containerd's memory and cpu
// controllers (memory.oom_control's oom_kill, Linux 4.13 and later;
// cpu.stat), one after the other: cgroup1.Cgroup.Stat would start a
// goroutine per hierarchy and read pids.current and pids.max, which hutch
// does not use. memory.max_usage_in_bytes (containerd's memory statistics
// skip the counters: see v1subsystems) and pids.events (containerd has no
// reader of it) are read here.
func (c *v1cgroup) read() (Events, error) {
	var e Events
	st := &v1stats.Metrics{CPU: &v1stats.CPUStat{Throttling: &v1stats.Throttle{}, Usage: &v1stats.CPUUsage{}}}
	for _, s := range c.stats {
		p, err := c.path(s.Name())
		if err == nil {
			err = s.Stat(p, st)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return e, fmt.Errorf("cgroup: read %s statistics of %s: %w", s.Name(), strings.Join(c.dirs, ", "), err)
		}
	}
	if st.MemoryOomControl != nil {
		e.OOMKills = st.MemoryOomControl.OomKill
	}
	if st.CPU.Throttling != nil {
		e.CPUThrottled = st.CPU.Throttling.ThrottledPeriods
		e.CPUThrottledUsec = st.CPU.Throttling.ThrottledTime / 1000 // ns
	}
	if d := c.dir("memory"); d != "" {
		if v, err := readString(filepath.Join(d, "memory.max_usage_in_bytes")); err == nil {
			e.MemoryPeak, _ = strconv.ParseUint(v, 10, 64)
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
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return nil
	}
	return c.kill(context.Background())
}

// kill SIGKILLs what is in the cgroup, in every hierarchy, with hutch's
// pidfd loop: cgroup v1 has no cgroup.kill, and containerd's cgroup1 no
// kill. c.mu is held.
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
	// Removed by hutch's rmdir, not cgroup1's Delete: see removeTrees.
	if err := removeTrees(context.Background(), c.dirs, c.kill); err != nil {
		return err
	}
	c.removed = true
	return nil
}
