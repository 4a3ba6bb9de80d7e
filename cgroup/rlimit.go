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

// Rlimits returns the limits that stand in for a cgroup's pids limit when
// New returned ErrUnavailable; the exec stage sets them (setrlimit) right
// before execve of the command, in the order given. fileSize (bytes) and
// openFiles are set when > 0, on every backend's sandbox, not only here;
// they are not cgroup limits.
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
//     dropped. No counter records a refusal.
//
// Memory has no rlimit here: every per-process memory rlimit counts address
// space that runtimes reserve and never use, so any value that bounds real
// use breaks them. RLIMIT_AS (all mappings) stops a JVM at start ("Could
// not allocate compressed class space": it reserves its heap, 1 GiB of
// class space and its code cache up front, about 4 GiB with a 24 GiB host)
// and AddressSanitizer (20 TiB of shadow and allocator space, mapped
// MAP_NORESERVE). RLIMIT_DATA (since Linux 4.7: private writable mappings,
// MAP_NORESERVE or not) lets the JVM start, since it reserves with
// PROT_NONE, but counts the 14 TiB of ASan's shadow: an ASan binary fails
// with RLIMIT_DATA = 1 TiB and starts at 16 TiB (measured with gcc 12 on
// Linux 6.18), and a limit of 16 TiB bounds nothing. The rlimit backend's memory limit is package limits' watchdog
// instead, which measures what the sandbox's processes really use.
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
	return out
}

// CPUTime returns an RLIMIT_CPU of seconds of CPU time per process: SIGXCPU
// at the soft limit (which kills unless handled), SIGKILL one second later.
func CPUTime(seconds uint64) Rlimit {
	return Rlimit{Resource: unix.RLIMIT_CPU, Cur: seconds, Max: seconds + 1}
}
