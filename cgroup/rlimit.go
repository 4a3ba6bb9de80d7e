package cgroup

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Rlimit is one resource limit for setrlimit(2)/prlimit(2): Resource is
// the RLIMIT_* number of this architecture, Cur the soft and Max the hard
// limit (equal here, so that the sandbox cannot raise it).
type Rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// MinAddressSpace is the smallest RLIMIT_AS Rlimits sets: 1 GiB. A Go
// program reserves about 800 MiB of address space at start ("fatal error:
// failed to reserve page summary memory" below that, measured with Go 1.26
// on amd64), so a smaller limit would make every Go program in the sandbox
// fail before main.
const MinAddressSpace = 1 << 30

var rlimitNames = map[int]string{
	unix.RLIMIT_AS:     "RLIMIT_AS",
	unix.RLIMIT_NPROC:  "RLIMIT_NPROC",
	unix.RLIMIT_FSIZE:  "RLIMIT_FSIZE",
	unix.RLIMIT_NOFILE: "RLIMIT_NOFILE",
	unix.RLIMIT_CPU:    "RLIMIT_CPU",
	unix.RLIMIT_CORE:   "RLIMIT_CORE",
}

// Name returns "RLIMIT_AS" and the like.
func (r Rlimit) Name() string {
	if n, ok := rlimitNames[r.Resource]; ok {
		return n
	}
	return fmt.Sprintf("RLIMIT(%d)", r.Resource)
}

func (r Rlimit) String() string {
	return fmt.Sprintf("%s=%d", r.Name(), r.Max)
}

// Rlimits returns the limits that stand in for a cgroup when New returned
// ErrUnavailable; the exec stage sets them (setrlimit) right before execve
// of the command, in the order given: RLIMIT_AS comes last, since after it
// the Go runtime or any other setup step may fail with ENOMEM. fileSize
// (bytes) and openFiles are set when > 0, on every backend's sandbox, not
// only here; they are not cgroup limits.
//
// What each does, and does not:
//
//   - RLIMIT_NOFILE = openFiles: the highest file descriptor number + 1 a
//     process may open; EMFILE beyond. Per process.
//   - RLIMIT_FSIZE = fileSize: the largest file a process may write or
//     extend, on any file system (tmpfs included). Beyond it the write
//     fails and the process gets SIGXFSZ, which kills it (exit status 153)
//     unless it ignores the signal (then EFBIG). It caps one file, not the
//     total: many files of that size still fill a disk.
//   - RLIMIT_NPROC = l.Pids: the number of processes and threads of the
//     sandbox's uid. Since Linux 5.14 it is counted per user namespace
//     (ucounts), so with the sandbox in its own user namespace it is per
//     sandbox; on older kernels it counts every process of the real uid on
//     the host, hutch's and the user's own included. fork/clone fail with
//     EAGAIN beyond it. A process with CAP_SYS_RESOURCE or CAP_SYS_ADMIN in
//     its namespace is exempt, so it only binds after capabilities are
//     dropped.
//   - RLIMIT_AS = max(l.MemoryBytes, MinAddressSpace): the virtual address
//     space of ONE process, not the memory of all together and not what it
//     really uses (RSS): mappings that are reserved but never touched count,
//     page cache and kernel memory do not. Beyond it mmap/brk fail with
//     ENOMEM: Python raises MemoryError, C's malloc returns NULL, Go and
//     the JVM abort ("failed to reserve page summary memory"; a JVM
//     reserves its heap, code cache and class space up front and needed
//     about 4 GiB here). Nothing is OOM-killed and no counter records it,
//     so hutch cannot say which limit stopped the command. N processes may
//     each use the limit: the total is bounded only by RLIMIT_NPROC ×
//     RLIMIT_AS.
//
// CPUs has no rlimit equivalent and is not enforced: RLIMIT_CPU counts CPU
// seconds per process (SIGXCPU at the soft limit, SIGKILL at the hard
// limit), not cores; a caller that wants a CPU-time budget adds one (see
// CPUTime).
func Rlimits(l Limits, fileSize int64, openFiles int) []Rlimit {
	var out []Rlimit
	add := func(res int, v uint64) { out = append(out, Rlimit{Resource: res, Cur: v, Max: v}) }
	if openFiles > 0 {
		add(unix.RLIMIT_NOFILE, uint64(openFiles))
	}
	if fileSize > 0 {
		add(unix.RLIMIT_FSIZE, uint64(fileSize))
	}
	if l.Pids > 0 {
		add(unix.RLIMIT_NPROC, uint64(l.Pids))
	}
	if l.MemoryBytes > 0 {
		as := uint64(l.MemoryBytes)
		if as < MinAddressSpace {
			as = MinAddressSpace
		}
		add(unix.RLIMIT_AS, as)
	}
	return out
}

// CPUTime returns an RLIMIT_CPU of seconds of CPU time per process: SIGXCPU
// at the soft limit (which kills unless handled), SIGKILL one second later.
func CPUTime(seconds uint64) Rlimit {
	return Rlimit{Resource: unix.RLIMIT_CPU, Cur: seconds, Max: seconds + 1}
}
