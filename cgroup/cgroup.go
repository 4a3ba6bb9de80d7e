// Package cgroup puts a sandbox under resource limits, so that a fork bomb,
// a memory hog or a runaway build cannot take the host down, and tells the
// caller in words which limit stopped a command.
//
// One interface, Cgroup, has backends chosen at run time by Probe:
//
//   - cgroup2-delegated: cgroup v2, as an unprivileged user whose process
//     sits in a subtree it may write (what systemd's Delegate=yes gives
//     user@UID.service). The sandbox gets a child cgroup there.
//   - cgroup2-root: cgroup v2 as root, a child near hutch's own cgroup.
//   - cgroup2-systemd-scope: asking the systemd user manager over D-Bus for
//     a transient scope with Delegate=yes holding hutch (scope.go), then
//     the cgroup2-delegated path inside it.
//   - cgroup1-root: a cgroup v1 (or hybrid) host as root: a per-sandbox
//     child in the memory, pids and cpu hierarchies.
//   - rlimit: no cgroup can be used (unprivileged, nothing delegated). New
//     returns ErrUnavailable and the caller applies Rlimits in the sandbox.
//
// The supervisor calls New before it starts the sandbox's init, starts the
// init inside the cgroup (cgroup v2: SysProcAttr.UseCgroupFD with FD, so
// that it is born there; cgroup v1: AddProc right after Start, before the
// init runs any command), and at the end calls Events (which limit was hit:
// Events.Messages words it), Kill and Remove. ReapStale removes the
// cgroups of supervisors that died without Remove.
//
// Every cgroup this package creates is named hutch-PID-START-NAME, where PID
// and START identify the supervisor process that made it (START is its
// start time in clock ticks since boot, field 22 of /proc/PID/stat, so that
// a reused pid does not look alive). ReapStale touches nothing else.
//
// The cgroups themselves are containerd's (github.com/containerd/cgroups/v3):
// its cgroup2.Manager and cgroup1.Cgroup set the limits, move processes
// in, read the statistics and kill (cgroup.kill); its cgroups.Mode and
// /proc/PID/cgroup parser tell the layout. hutch keeps what the library
// has no notion of: choosing where to create (Probe), creating the
// directory with one mkdir (never taking over an existing cgroup), the
// delegated-leaf move, ownership checks, the pidfd kill loop where there
// is no cgroup.kill, stale reaping, pids.events and the messages. It does
// not use the library where it does not fit:
//   - cgroup2.NewManager and NewChild create with MkdirAll and enable the
//     controllers in every ancestor up to the mount; hutch enables them
//     only in its own cgroup (a manager rooted at that cgroup does it).
//   - cgroup2.Manager.Kill without cgroup.kill (Linux < 5.14) freezes,
//     signals by pid and waits for each process, reaping the caller's
//     children and logging through logrus; hutch's loop does it there.
//   - Delete (both versions) walks every control file of the cgroup to
//     check that no task is left before it removes it, which the kill just
//     made sure of: 0.4 ms more than hutch's rmdir on every run
//     (removeTrees).
//   - cgroup2.NewSystemd asks the system manager (the system bus) for a
//     unit in system.slice, never sets Delegate (its canDelegate is never
//     true) and takes no context; the scope backend needs the user manager,
//     Delegate=yes and a 5 s bound, so scope.go asks through go-systemd.
//
// Its dependencies (protobuf for the statistics types, cilium/ebpf for the
// device filter, logrus) are initialised by every hutch process: see
// docs/PERFORMANCE.md for what they cost and docs/RESOURCES.md.
package cgroup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Backend names, as Cgroup.Backend and Host.Backend report them.
const (
	BackendV2Delegated = "cgroup2-delegated"
	BackendV2Root      = "cgroup2-root"
	BackendV2Scope     = "cgroup2-systemd-scope"
	BackendV1Root      = "cgroup1-root"
	BackendV1Delegated = "cgroup1-delegated" // a v1 hierarchy chown'ed to the user (rare)
	BackendRlimit      = "rlimit"
)

// ErrUnavailable is returned (wrapped, with the reason) by New when no
// cgroup backend can be used; the caller falls back to Rlimits.
var ErrUnavailable = errors.New("no usable cgroup")

// ErrControllerMissing is returned (wrapped) by New when a cgroup can be
// created but lacks a controller a non-zero limit needs (in practice: cpu
// for Limits.CPUs). It does not wrap ErrUnavailable: rlimits cannot cap
// cores either. The caller may retry without that limit or fail.
var ErrControllerMissing = errors.New("cgroup controller missing")

// Limits are the sandbox's resource limits. Zero means unlimited.
type Limits struct {
	// MemoryBytes caps the memory (anonymous, page cache, kernel memory on
	// v2) of all processes together; swap is always 0 where the kernel lets
	// hutch control it. Exceeding it gets the largest process OOM-killed.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Pids caps the number of tasks (processes and threads) together.
	// hutch's own stages count: see docs/RESOURCES.md for the margin.
	Pids int64 `json:"pids,omitempty"`
	// CPUs caps CPU time as a number of cores (0.5: half of one core per
	// 100 ms period; 2: two cores' worth).
	CPUs float64 `json:"cpus,omitempty"`
}

func (l Limits) validate() error {
	if l.MemoryBytes < 0 || l.Pids < 0 || l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) {
		return fmt.Errorf("cgroup: invalid limits %+v: negative or not a number", l)
	}
	if l.CPUs > 0 && cpuQuota(l.CPUs) > math.MaxInt32 {
		return fmt.Errorf("cgroup: cpus %g is too large", l.CPUs)
	}
	return nil
}

// cpuPeriod is the period of cpu.max / cpu.cfs_period_us, in microseconds.
const cpuPeriod = 100000

// cpuQuota returns the quota per cpuPeriod for cpus cores (the kernel's
// minimum is 1 ms).
func cpuQuota(cpus float64) int64 {
	q := int64(math.Round(cpus * cpuPeriod))
	if q < 1000 {
		q = 1000
	}
	return q
}

// Options adjust New.
type Options struct {
	// Parent, when set, is where the sandbox's cgroup is made instead of
	// the place Probe picks: on cgroup v2 a path relative to the v2 mount
	// (such as "/user.slice/user-1000.slice/user@1000.service/app.slice"),
	// on cgroup v1 a path relative to each hierarchy's root. It must exist,
	// be writable and (v2) have memory and pids enabled for its children.
	// To move the init there, the supervisor must also be allowed to write
	// cgroup.procs of the nearest common ancestor of its own cgroup and
	// Parent (simplest: Parent is an ancestor of it). ReapStale does not
	// look in a Parent that is not hutch's cgroup or one of its ancestors.
	Parent string
}

// Cgroup is one sandbox's cgroup. Its methods are safe for concurrent use.
type Cgroup interface {
	// Backend is one of the Backend* names.
	Backend() string
	// Path is the sandbox cgroup's directory (cgroup v1: the one in the
	// memory hierarchy; Paths has all of them).
	Path() string
	// Paths are the sandbox cgroup's directories: one on v2, one per
	// hierarchy (memory, pids, cpu) on v1.
	Paths() []string
	// FD returns an O_PATH|O_DIRECTORY descriptor of the cgroup for
	// clone3's CLONE_INTO_CGROUP (SysProcAttr.UseCgroupFD/CgroupFD), so
	// that the init is born inside it. false on cgroup v1. The descriptor
	// belongs to the Cgroup and is closed by Remove.
	FD() (int, bool)
	// AddProc moves process pid (all its threads) into the cgroup.
	AddProc(pid int) error
	// Events reports which limits were hit so far. After Remove it returns
	// what was read at Remove.
	Events() (Events, error)
	// Kill SIGKILLs every process in the cgroup and waits (bounded) until
	// it is empty. The caller still reaps its own children.
	Kill() error
	// Remove kills what is left and removes the cgroup's directories. It
	// is idempotent.
	Remove() error
}

// Events are what the kernel counted in a cgroup: the evidence of which
// limit stopped a command.
type Events struct {
	// OOMKills is the number of processes the OOM killer killed because
	// the memory limit was reached (v2 memory.events oom_kill, v1
	// memory.oom_control oom_kill, kernel >= 4.13).
	OOMKills uint64 `json:"oom_kills"`
	// PidsMaxHits is the number of forks (and thread creations) refused
	// because pids.max was reached (pids.events max).
	PidsMaxHits uint64 `json:"pids_max_hits"`
	// CPUThrottled is the number of periods in which the cgroup was
	// throttled for exceeding its CPU quota (cpu.stat nr_throttled), and
	// CPUThrottledUsec the time it spent throttled (v2 throttled_usec, v1
	// throttled_time).
	CPUThrottled     uint64 `json:"cpu_throttled_periods"`
	CPUThrottledUsec uint64 `json:"cpu_throttled_usec"`
	// MemoryPeak is the highest memory use seen, in bytes (v2 memory.peak,
	// kernel >= 5.19; v1 memory.max_usage_in_bytes). 0 when not reported.
	MemoryPeak uint64 `json:"memory_peak_bytes,omitempty"`
}

// Messages returns one line per limit that stopped something, in the words
// hutch prints on stderr, given the limits the user asked for (before any
// margin the caller added for hutch's own processes):
//
//	hutch: killed: memory limit 512MiB exceeded
//	hutch: process limit 256 reached: 3 forks refused
//
// CPU throttling slows a command down but stops nothing; it is not listed
// (see CPUNote).
func (e Events) Messages(user Limits) []string {
	var out []string
	if e.OOMKills > 0 {
		lim := "memory limit"
		if user.MemoryBytes > 0 {
			lim += " " + FormatBytes(user.MemoryBytes)
		}
		msg := "hutch: killed: " + lim + " exceeded"
		if e.OOMKills > 1 {
			msg += fmt.Sprintf(" (%d processes killed)", e.OOMKills)
		}
		out = append(out, msg)
	}
	if e.PidsMaxHits > 0 {
		lim := "process limit"
		if user.Pids > 0 {
			lim += " " + strconv.FormatInt(user.Pids, 10)
		}
		out = append(out, fmt.Sprintf("hutch: %s reached: %d %s refused", lim, e.PidsMaxHits, plural(e.PidsMaxHits, "fork", "forks")))
	}
	return out
}

// CPUNote describes CPU throttling, or returns "" when there was none:
//
//	hutch: cpu limit 0.5 cores: throttled 1.2s in 14 periods
func (e Events) CPUNote(user Limits) string {
	if e.CPUThrottled == 0 {
		return ""
	}
	lim := "cpu limit"
	if user.CPUs > 0 {
		unit := "cores"
		if user.CPUs == 1 {
			unit = "core"
		}
		lim += " " + strconv.FormatFloat(user.CPUs, 'f', -1, 64) + " " + unit
	}
	return fmt.Sprintf("hutch: %s: throttled %.1fs in %d %s", lim, float64(e.CPUThrottledUsec)/1e6, e.CPUThrottled, plural(e.CPUThrottled, "period", "periods"))
}

func plural(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// FormatBytes formats n with the largest binary unit that divides it
// exactly (512MiB, 2GiB, 1536KiB), else in bytes (1000000B).
func FormatBytes(n int64) string {
	units := []struct {
		size int64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}}
	for _, u := range units {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// mu serialises New and ReapStale within the process: the cgroup v2 path
// may move the process into a leaf and enable controllers once.
var mu sync.Mutex

var seq atomic.Uint64

// New creates the sandbox cgroup named name (letters, digits, '_' and '-';
// "" picks a sequence number) with limits l, on the backend Probe picks.
// It returns an error wrapping ErrUnavailable, with the reason, when no
// cgroup can be used, and one wrapping ErrControllerMissing when the cgroup
// lacks a controller a non-zero limit needs.
func New(ctx context.Context, name string, l Limits, opts Options) (Cgroup, error) {
	return newCgroup(ctx, name, l, opts, os.Getpid())
}

// newCgroup is New with the owner pid chosen (tests name cgroups after a
// dead pid to exercise ReapStale).
func newCgroup(ctx context.Context, name string, l Limits, opts Options, owner int) (Cgroup, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	if name == "" {
		name = strconv.FormatUint(seq.Add(1), 10)
	}
	if !validName(name) {
		return nil, fmt.Errorf("cgroup: invalid sandbox name %q: use 1-64 letters, digits, '_' and '-'", name)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	h := probe(opts.Parent)
	if h.Backend == BackendV2Scope {
		unit, err := joinScope(ctx, h.SystemdUserBus, name)
		if err != nil && h.scopeFallback != "" {
			h.Backend = BackendV2Delegated
			h.Reason = h.scopeFallback + " (" + BackendV2Scope + ": " + err.Error() + ")"
			return newV2(ctx, h, leafName(owner, startTime(owner), name), l)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, BackendV2Scope, err)
		}
		h = probe(opts.Parent)
		if h.Backend != BackendV2Delegated {
			return nil, fmt.Errorf("%w: hutch moved into the systemd scope %s, but the scope is not usable: %s", ErrUnavailable, unit, h.Reason)
		}
		h.Reason = "in the transient systemd scope " + unit + " (Delegate=yes): " + h.Reason
	}
	leaf := leafName(owner, startTime(owner), name)
	switch h.Backend {
	case BackendV2Delegated, BackendV2Root:
		return newV2(ctx, h, leaf, l)
	case BackendV1Root, BackendV1Delegated:
		return newV1(ctx, h, leaf, l)
	}
	return nil, fmt.Errorf("%w: %s", ErrUnavailable, h.Reason)
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// namePrefix starts the name of every cgroup this package creates.
const namePrefix = "hutch-"

// supervisorName is the NAME of the leaf a cgroup v2 supervisor moves
// itself into when it enables controllers in its own cgroup.
const supervisorName = "supervisor"

func leafName(pid int, start uint64, name string) string {
	return fmt.Sprintf("%s%d-%d-%s", namePrefix, pid, start, name)
}

// parseLeafName parses hutch-PID-START-NAME strictly: anything else (such
// as a systemd unit called hutch-something.scope) is not ours.
func parseLeafName(s string) (pid int, start uint64, name string, ok bool) {
	rest, found := strings.CutPrefix(s, namePrefix)
	if !found {
		return 0, 0, "", false
	}
	parts := strings.SplitN(rest, "-", 3)
	if len(parts) != 3 || !validName(parts[2]) || !digits(parts[0]) || !digits(parts[1]) {
		return 0, 0, "", false
	}
	p, err1 := strconv.Atoi(parts[0])
	st, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil || p <= 0 {
		return 0, 0, "", false
	}
	return p, st, parts[2], true
}

func digits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
